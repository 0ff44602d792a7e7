"""Reading a serving benchmark's detailed result: `vllm bench serve --save-result --save-detailed`
(vLLM's benchmarks/benchmark_serving.py / vllm/benchmarks/serve.py) or SGLang's
`python -m sglang.bench_serving --output-file F --output-details`.

vLLM writes one JSON object; SGLang appends one JSON object per run to a JSONL file (`run` picks
one, default the last). Per-request lists, index i = the i-th request sent: `input_lens`,
`output_lens` (0 for a failed request), `ttfts` (seconds), `itls` (seconds between streamed
chunks), `errors` ("" when it succeeded), `generated_texts`; newer vLLM adds `start_times`
(time.perf_counter() when the request was sent), `latencies` and `queue_times`. Run settings:
`request_rate` (a number, or "inf" / Infinity), `burstiness` (vLLM only, gamma shape; 1 =
Poisson), `max_concurrency` (null when unlimited).

Arrivals (when each request reached the server) are rebuilt, in this order of preference:
- `measured`: `start_times` minus the earliest one (newer vLLM; already after the client's
  concurrency limit);
- `all_at_zero`: request_rate inf: every request is sent at once;
- `seeded`: the send schedule is drawn as the tool draws it, with `seed`. vLLM: gaps
  Gamma(shape=burstiness, scale=1/(rate*burstiness)), cumulated (the first request waits one
  gap too) and rescaled so the last send is at n/rate; SGLang: the first at 0, then
  Exponential(1/rate) gaps; a vLLM ramp-up run (`ramp_up_strategy`, `ramp_up_start_rps`,
  `ramp_up_end_rps`) draws each gap at that request's rate, without rescaling. Both tools draw from numpy's global RandomState seeded with their
  --seed (vLLM default 0, SGLang default 1) but sample the dataset from it first, so the draws
  have the run's distribution and rate, not its exact times.
  With `max_concurrency`, a FIFO semaphore of that many slots is replayed on the scheduled
  times with each request's measured latency (ttft + sum(itls), or `latencies`), as the client's
  asyncio.Semaphore admits them.
Every time is shifted so the earliest arrival is 0. Failed requests (a non-empty error or no
output) take part in the schedule and the semaphore but are left out of the trace.

The trace has the schema's columns plus `measured_ttft_s`, `measured_tpot_s` ((latency - ttft)
/ (outputs - 1), NaN for one output, as the tools compute TPOT), `measured_e2e_s` and
`bench_index` (the request's index in the file); `itls` keeps every inter-token gap. The
arrivals are rebuilt in traces/bench_arrivals.py. A file of another kind (a result saved without
--save-detailed, servesim's own bench.json, a calibration) is named as such (sim/util/file_kinds.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import pandas as pd

from sim.util.errors import TraceError
from sim.util.file_kinds import EXPECTED_BENCH, describe_json
from traces.bench_arrivals import (concurrency_replay, positive_number, ramp_rates,
                                   rebuild_arrivals, send_schedule)
from traces.schema import require_rows, validate_trace

__all__ = ["BenchResult", "concurrency_replay", "parse_bench_result", "read_bench_result",
           "send_schedule"]

FORMATS = ("vllm", "sglang")  # detailed-result layouts read here
REQUIRED_KEYS = ("input_lens", "output_lens", "ttfts", "itls")  # per-request lists needed
MAX_FILE_BYTES = 512 * 2**20  # bytes: a larger result file is refused before it is read
SUMMARY_KEYS = ("duration", "completed", "failed", "request_throughput", "output_throughput",
                "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms")


@dataclass(frozen=True)
class BenchResult:
    """One benchmark run: its requests as a trace with measured latencies, and its settings."""

    source: str  # the file read
    format: str  # "vllm" or "sglang"
    trace: pd.DataFrame  # the succeeded requests (schema + measured_* columns, seconds)
    request_rate: float  # requests/s the client aimed at; inf: all sent at once
    burstiness: float  # gamma shape of the send gaps (1 = Poisson); dimensionless
    max_concurrency: int | None  # requests the client kept in flight at most; None: unlimited
    arrivals: str  # how arrivals were rebuilt: measured | all_at_zero | seeded
    num_failed: int  # requests that failed in the benchmark (left out of `trace`)
    summary: Mapping[str, float] = field(default_factory=dict)  # the file's own metrics (ms, s)
    itls: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(
        {"bench_index": [], "gap_s": []}))  # the succeeded requests' inter-token gaps (seconds)

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise TraceError(self.source, f"format must be one of {FORMATS}", field="format",
                             value=self.format)
        if not (self.request_rate > 0):
            raise TraceError(self.source, "must be > 0", field="request_rate",
                             value=self.request_rate)
        if not (self.burstiness > 0):
            raise TraceError(self.source, "must be > 0", field="burstiness",
                             value=self.burstiness)
        object.__setattr__(self, "summary", MappingProxyType(dict(self.summary)))


def read_bench_result(path: str | Path, *, fmt: str | None = None, seed: int | None = None,
                      run: int = -1) -> BenchResult:
    """The benchmark result in `path` (format guessed unless `fmt`); `seed` draws the send
    schedule when the file has no start_times (default: the tool's default --seed)."""
    file = Path(path)
    source = str(path)
    if not file.is_file():
        raise TraceError(source, "no such benchmark result file")
    if file.stat().st_size > MAX_FILE_BYTES:
        raise TraceError(source, f"larger than {MAX_FILE_BYTES} bytes")
    try:
        text = file.read_bytes().decode("utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        raise TraceError(source, f"cannot read it as UTF-8 text: {exc}") from None
    return parse_bench_result(_pick_run(_json_objects(text, source), run, source), source,
                              fmt=fmt, seed=seed)


def _json_objects(text: str, source: str) -> list[Any]:
    """The file as one JSON value, else as JSON lines (SGLang appends one run per line)."""
    try:
        return [json.loads(text)]
    except ValueError:
        pass
    runs = []
    for k, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                runs.append(json.loads(line))
            except ValueError as exc:
                raise TraceError(source, f"not JSON or JSON lines: {exc}", row=k) from None
    if not runs:
        raise TraceError(source, "the file is empty")
    return runs


def _pick_run(runs: list[Any], run: int, source: str) -> Mapping[str, Any]:
    if not -len(runs) <= run < len(runs):
        raise TraceError(source, f"the file holds {len(runs)} run(s)", field="run", value=run)
    data = runs[run]
    if not isinstance(data, dict):
        raise TraceError(source, f"a run must be a JSON object, got {type(data).__name__}")
    return data


def guess_format(data: Mapping[str, Any]) -> str:
    """"sglang" for SGLang's keys (dataset_name, total_output_tokens_retokenized), else "vllm"."""
    sglang = "total_output_tokens_retokenized" in data or (
        "dataset_name" in data and "burstiness" not in data)
    return "sglang" if sglang else "vllm"


def parse_bench_result(data: Mapping[str, Any], source: str, *, fmt: str | None = None,
                       seed: int | None = None) -> BenchResult:
    """A `BenchResult` from one run's JSON object (see the module docstring)."""
    fmt = fmt or guess_format(data)
    if fmt not in FORMATS:
        raise TraceError(source, f"format must be one of {FORMATS}", field="format", value=fmt)
    lists = _request_lists(data, source)
    rate = _rate(data.get("request_rate", math.inf), source)
    raw_burst = data.get("burstiness")
    burst = 1.0 if raw_burst is None else positive_number(raw_burst, "burstiness", source)
    conc = data.get("max_concurrency")
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
        raise TraceError(source, "must be null or an int >= 1", field="max_concurrency",
                         value=conc)
    latency = lists["latencies"]
    ramp = ramp_rates(data, latency.size, source)
    arrival, how = rebuild_arrivals(lists, fmt, rate if ramp is None else ramp, burst, conc,
                                    latency, (0 if fmt == "vllm" else 1) if seed is None else seed)
    ok = lists["ok"]
    ttft = lists["ttfts"]
    out = lists["output_lens"]
    tpot = np.where(out > 1, (latency - ttft) / np.maximum(out - 1, 1), np.nan)
    frame = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": lists["input_lens"],
                          "output_tokens": out, "measured_ttft_s": ttft,
                          "measured_tpot_s": tpot, "measured_e2e_s": latency,
                          "bench_index": np.arange(arrival.size)})[ok]
    frame["arrival_s"] -= frame["arrival_s"].min() if len(frame) else 0.0
    trace = require_rows(validate_trace(frame, source), source)
    summary = {k: float(data[k]) for k in SUMMARY_KEYS
               if isinstance(data.get(k), (int, float)) and not isinstance(data.get(k), bool)}
    owner = lists["itl_owner"]
    itls = pd.DataFrame({"bench_index": owner, "gap_s": lists["itl_gaps"]})[ok[owner]]
    return BenchResult(source, fmt, trace, rate, burst, conc, how, int((~ok).sum()), summary,
                       itls.reset_index(drop=True))


def _rate(value: Any, source: str) -> float:
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    return positive_number(value, "request_rate", source)


def _request_lists(data: Mapping[str, Any], source: str) -> dict[str, np.ndarray]:
    """The per-request lists as arrays, every one the same length; `ok` marks successes."""
    for key in REQUIRED_KEYS:
        if key not in data:
            raise TraceError(source, f"is {describe_json(data)}, with no {key!r}; expected "
                                     f"{EXPECTED_BENCH}", field=key, value=None)
        if not isinstance(data[key], list):
            raise TraceError(source, "must be a JSON list", field=key,
                             value=type(data[key]).__name__)
    n = len(data["input_lens"])
    if n == 0:
        raise TraceError(source, "the run has no requests", field="input_lens", value=[])
    out = {"input_lens": _numbers(data, "input_lens", n, source, integer=True),
           "output_lens": _numbers(data, "output_lens", n, source, integer=True),
           "ttfts": _numbers(data, "ttfts", n, source, integer=False)}
    itls = data["itls"]
    _check_length(itls, "itls", n, source)
    for i, gaps in enumerate(itls):
        if not isinstance(gaps, list) or not all(_is_number(g) and g >= 0 for g in gaps):
            raise TraceError(source, "must be a list of seconds >= 0", row=i, field="itls",
                             value=gaps)
    out["itl_owner"] = np.repeat(np.arange(n), [len(g) for g in itls])
    out["itl_gaps"] = np.array([g for gaps in itls for g in gaps], dtype=np.float64)
    summed = out["ttfts"] + np.array([math.fsum(g) for g in itls], dtype=np.float64)
    has_lat = isinstance(data.get("latencies"), list)
    out["latencies"] = _numbers(data, "latencies", n, source, integer=False) if has_lat else summed
    errors = data.get("errors")
    failed = [bool(e) for e in errors] if isinstance(errors, list) else [False] * n
    _check_length(failed, "errors", n, source)
    out["ok"] = ~np.array(failed, dtype=bool) & (out["output_lens"] > 0) & (out["ttfts"] > 0)
    if isinstance(data.get("start_times"), list):
        out["start_times"] = _numbers(data, "start_times", n, source, integer=False)
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_length(values: list, key: str, n: int, source: str) -> None:
    if len(values) != n:
        raise TraceError(source, f"has {len(values)} entries but 'input_lens' has {n}",
                         field=key, value=f"list of {len(values)}")


def _numbers(data: Mapping[str, Any], key: str, n: int, source: str, *,
             integer: bool) -> np.ndarray:
    """data[key] as a float64 / int64 array of n finite values >= 0, errors naming the row."""
    values = data[key]
    if not isinstance(values, list):
        raise TraceError(source, "must be a JSON list", field=key, value=type(values).__name__)
    _check_length(values, key, n, source)
    for i, v in enumerate(values):
        if not _is_number(v) or v < 0 or (integer and v != int(v)):
            kind = "an integer" if integer else "a number of seconds"
            raise TraceError(source, f"must be {kind} >= 0", row=i, field=key, value=v)
    return np.array(values, dtype=np.int64 if integer else np.float64)
