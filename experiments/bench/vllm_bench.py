"""A run's results as the JSON `vllm bench serve --save-result` writes (bench.json).

The key set and units follow vllm-project/vllm `vllm/benchmarks/serve.py` at commit def9ce85ba10
(`main_async` result_json + `benchmark` result + `process_one_metric`), for a generative model,
without `--save-detailed`, `--metadata` or a ramp-up (the per-request lists are then dropped):

    date, endpoint_type, backend, label, model_id, tokenizer_id, num_prompts,
    request_rate, burstiness, max_concurrency,
    duration, completed, failed, total_input_tokens, total_output_tokens, request_throughput,
    request_goodput, output_throughput, total_token_throughput, max_output_tokens_per_s,
    max_concurrent_requests,
    then for each of --percentile-metrics: mean_<m>_ms, median_<m>_ms, std_<m>_ms and
    p<P>_<m>_ms for each of --metric-percentiles (P written as vLLM writes it: 99, 99.9).

Times are ms (latencies) and s (`duration`); throughputs per second. TTFT, TPOT, E2EL are those of
completed requests, statistics as vLLM computes them (numpy mean, population std, median and
linearly interpolated percentiles; 0 when no request completed, as vLLM's `or 0`). How the keys
without a direct simulator meaning are filled:

- date: 19700101-000000 (%Y%m%d-%H%M%S, as vLLM), the Unix epoch: a simulated run has no date,
  and a fixed one keeps two runs of one config byte-identical (when the run was written is in
  its host_timing.json, experiments/files/host_files.py);
- endpoint_type, backend: "servesim-<cluster.backend>" (sim or real); label: the policy label;
- model_id, tokenizer_id: cluster.model (vLLM's tokenizer defaults to the model);
- num_prompts: requests in the run's workload; failed: rejected + failed + cancelled requests
  (vLLM: requests that returned an error; a client timeout is one);
- request_rate: the run's rate, "inf" for a trace replayed with its own timestamps (vLLM writes
  "inf" for a self-timed trace too); burstiness / max_concurrency: the workload's, when the
  config has them, else 1.0 (Poisson) / null;
- request_goodput: null without --goodput (as vLLM);
- max_output_tokens_per_s: tokens in the busiest 1-second bucket counted from the first arrival,
  each request's tokens placed at its first token and then evenly up to its finish (the
  simulator keeps no per-token time); max_concurrent_requests: the most completed requests active
  (arrival to finish) in one such bucket, as vLLM at that commit counts them (counted in memory
  bounded by the request count, whatever the span and token count: experiments/bench/peaks.py);
- ITL: from the run summary (exact weighted gaps over all tokens; its percentiles pick the sample
  at the percentile (inverted CDF) where vLLM interpolates, a difference below one gap), so only
  the percentiles of sim.metrics.summary.ITL_PERCENTILES are available for itl.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from experiments.bench.peaks import COLUMNS as PEAK_TIMES
from experiments.bench.peaks import Chunks, peaks_of, times_of
from experiments.files.outdir import run_dir as run_path
from experiments.report.results import write_json
from sim.metrics.summary import ITL_PERCENTILES
from sim.records.column_stats import ColumnStats, array_stats, column_stats
from sim.records.record_file import RecordColumns
from sim.util.errors import ConfigError

VLLM_REFERENCE = "vllm-project/vllm vllm/benchmarks/serve.py @ def9ce85ba10"
BENCH_DATE = datetime(1970, 1, 1)  # bench.json's `date`: fixed, never the wall clock
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")  # vLLM's latency metric names
GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # metrics vLLM's --goodput accepts
SETUP_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
              "num_prompts", "request_rate", "burstiness", "max_concurrency")
RESULT_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
               "request_throughput", "request_goodput", "output_throughput",
               "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests")
PEAK_COLUMNS = (*PEAK_TIMES, "output_tokens", "request_id")  # what peak_buckets reads
RECORD_LATENCY = {"ttft": "ttft_s", "tpot": "tpot_s", "e2el": "e2e_s"}  # vLLM name -> records


@dataclass(frozen=True)
class BenchOptions:
    """vllm bench serve's reporting options, as `python -m experiments.run` takes them."""

    percentile_metrics: tuple[str, ...] = PERCENTILE_METRICS  # metrics given mean/median/std/pN
    metric_percentiles: tuple[float, ...] = (50.0, 90.0, 99.0)  # percent, each in [0, 100]
    goodput: tuple[tuple[str, float], ...] = ()  # (metric, SLO in ms); () -> no goodput

    def __post_init__(self) -> None:
        for name in self.percentile_metrics:
            if name not in PERCENTILE_METRICS:
                raise ConfigError("--percentile-metrics", name,
                                  f"not one of {', '.join(PERCENTILE_METRICS)}")
        for p in self.metric_percentiles:
            if not 0 <= p <= 100:
                raise ConfigError("--metric-percentiles", p, "a percentile in [0, 100]")
            if "itl" in self.percentile_metrics and p not in ITL_PERCENTILES:
                raise ConfigError("--metric-percentiles", p, "ITL percentiles are kept for "
                                  f"{', '.join(map(percentile_word, ITL_PERCENTILES))} only "
                                  "(or leave itl out of --percentile-metrics)")
        for name, slo_ms in self.goodput:
            if name not in GOODPUT_METRICS:
                raise ConfigError("--goodput", name, f"not one of {', '.join(GOODPUT_METRICS)}")
            if not slo_ms >= 0:
                raise ConfigError(f"--goodput {name}", slo_ms, "an SLO in ms, >= 0")


def parse_options(percentile_metrics: str | None, metric_percentiles: str | None,
                  goodput: Sequence[str] | None) -> BenchOptions:
    """BenchOptions from the command line's strings ('ttft,tpot', '50,99', ['ttft:200'])."""
    kwargs: dict[str, Any] = {}
    if percentile_metrics is not None:
        kwargs["percentile_metrics"] = tuple(m.strip() for m in percentile_metrics.split(","))
    if metric_percentiles is not None:
        kwargs["metric_percentiles"] = tuple(
            _number("--metric-percentiles", p) for p in metric_percentiles.split(","))
    if goodput:
        pairs = []
        for pair in goodput:
            name, sep, value = pair.partition(":")
            if not sep:
                raise ConfigError("--goodput", pair, "a KEY:VALUE pair, e.g. ttft:200 (ms)")
            pairs.append((name.strip(), _number(f"--goodput {name}", value)))
        kwargs["goodput"] = tuple(pairs)
    return BenchOptions(**kwargs)


def _number(field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(field, text, "not a number") from None
    if not math.isfinite(value):
        raise ConfigError(field, text, "must be finite")
    return value


def percentile_word(p: float) -> str:
    """99 -> '99', 99.9 -> '99.9': how vLLM writes a percentile in a key."""
    return str(int(p)) if int(p) == p else str(p)


def bench_keys(options: BenchOptions) -> list[str]:
    """The exact keys of bench.json for `options`, in vLLM's order."""
    keys = [*SETUP_KEYS, *RESULT_KEYS]
    for m in (name for name in PERCENTILE_METRICS if name in options.percentile_metrics):
        keys += [f"mean_{m}_ms", f"median_{m}_ms", f"std_{m}_ms"]
        keys += [f"p{percentile_word(p)}_{m}_ms" for p in options.metric_percentiles]
    return keys


def latency_stats(metric: str, values_s: np.ndarray,
                  percentiles: Sequence[float]) -> dict[str, float]:
    """mean/median/std/p<P>_<metric>_ms of latencies in seconds, as vLLM computes them."""
    return stats_ms(metric, array_stats(values_s, percentiles), percentiles)


def stats_ms(metric: str, stats: ColumnStats, percentiles: Sequence[float]) -> dict[str, float]:
    """`latency_stats` from a column's statistics (in seconds, at `percentiles`)."""
    if not stats.count:  # vLLM: np.mean(values or 0)
        stats = array_stats(np.zeros(1), percentiles)
    out = {f"mean_{metric}_ms": stats.mean * 1000, f"median_{metric}_ms": stats.median * 1000,
           f"std_{metric}_ms": stats.std * 1000}
    for p, value in zip(percentiles, stats.percentiles):
        out[f"p{percentile_word(p)}_{metric}_ms"] = value * 1000
    return out


def itl_stats(summary: Mapping[str, Any], percentiles: Sequence[float]) -> dict[str, float]:
    """ITL statistics in ms from a run summary's seconds (0 where the run had no gap)."""
    def ms(key: str) -> float:
        value = summary.get(key)
        return 0.0 if value is None or not math.isfinite(value) else float(value) * 1000

    out = {"mean_itl_ms": ms("mean_itl_s"), "median_itl_ms": ms("median_itl_s"),
           "std_itl_ms": ms("std_itl_s")}
    for p in percentiles:
        key = "median_itl_s" if p == 50 else f"p{percentile_word(p)}_itl_s"
        out[f"p{percentile_word(p)}_itl_ms"] = ms(key)
    return out


def good_requests(done: pd.DataFrame, goodput: Sequence[tuple[str, float]]) -> int:
    """Completed requests within every SLO (ms); TPOT counts as 0 for one output (as vLLM)."""
    ok = np.ones(len(done), dtype=bool)
    for name, slo_ms in goodput:
        values = done[RECORD_LATENCY[name]].to_numpy(dtype=np.float64)
        if name == "tpot":
            values = np.nan_to_num(values, nan=0.0)
        ok &= values <= slo_ms / 1000
    return int(ok.sum())


def _rate(value: Any) -> float | str:
    """vLLM's request_rate: a float (req/s), or "inf" (also for a trace's own timestamps)."""
    return "inf" if value is None or math.isinf(float(value)) else float(value)


def bench_result(records: pd.DataFrame | RecordColumns, summary: Mapping[str, Any],
                 run: Mapping[str, Any], options: BenchOptions,
                 workload: Mapping[str, Any] | None = None,
                 date: datetime | None = None) -> dict[str, Any]:
    """bench.json's content for one run: `run` is config.json's run section (label, rate,
    num_requests, cluster), `workload` the experiment's workload section."""
    col = RecordColumns(records)
    finished = col.isin("status", ("finished",))
    statuses = col.value_counts("status")  # requests in each final state
    num_done = int(finished.sum())
    duration = float(summary.get("duration_s") or 0.0)
    cluster, workload = run.get("cluster") or {}, workload or {}
    prompt = int(col["prompt_tokens"][finished].sum())
    output = int(col["output_tokens"][finished].sum())
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: None)
    peak_tokens, peak_requests = peaks_of(finished_chunks(col))
    backend = f"servesim-{cluster.get('backend', 'sim')}"
    out: dict[str, Any] = {
        "date": (date or BENCH_DATE).strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend, "backend": backend, "label": run.get("label"),
        "model_id": cluster.get("model"), "tokenizer_id": cluster.get("model"),
        "num_prompts": run.get("num_requests", len(col)),
        "request_rate": _rate(run.get("rate")),
        "burstiness": workload.get("burstiness", 1.0),
        "max_concurrency": workload.get("max_concurrency"),
        "duration": duration, "completed": num_done,
        "failed": sum(statuses.get(s, 0) for s in ("rejected", "failed", "cancelled")),
        "total_input_tokens": prompt, "total_output_tokens": output,
        "request_throughput": per_s(num_done),
        "request_goodput": per_s(good_requests(
            done_frame(col, finished, [RECORD_LATENCY[n] for n, _ in options.goodput]),
            options.goodput)) if options.goodput else None,
        "output_throughput": per_s(output), "total_token_throughput": per_s(prompt + output),
        "max_output_tokens_per_s": peak_tokens, "max_concurrent_requests": peak_requests,
    }
    for m in (name for name in PERCENTILE_METRICS if name in options.percentile_metrics):
        if m == "itl":
            out.update(itl_stats(summary, options.metric_percentiles))
        else:
            pcts = options.metric_percentiles
            out.update(stats_ms(m, column_stats(col, RECORD_LATENCY[m], finished, pcts), pcts))
    return out


def finished_chunks(col: RecordColumns) -> Chunks:
    """The finished requests' PEAK_COLUMNS, a batch of the records at a time."""
    def chunks():
        for part in col.batches((*PEAK_COLUMNS, "status")):
            done = part[part["status"] == "finished"]
            yield times_of(done, done.index.to_numpy())
    return chunks


def done_frame(col: RecordColumns, finished: np.ndarray, names: Sequence[str]) -> pd.DataFrame:
    """The finished requests' columns `names` (those the records have, read one at a time),
    as a frame."""
    return pd.DataFrame({name: col[name][finished] for name in dict.fromkeys(names)
                         if name in col})


def write_bench(run_dir: Path, options: BenchOptions,
                records: pd.DataFrame | RecordColumns | None = None) -> dict[str, Any]:
    """(Re)write RUN_DIR/bench.json from the run's files (records given: used instead of
    records.parquet, which is otherwise read a few columns at a time); returns its content."""
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    if records is None:
        records = RecordColumns(run_dir / "records.parquet")
    result = bench_result(records, summary, config.get("run") or {}, options,
                          (config.get("experiment") or {}).get("workload"))
    write_json(run_dir / "bench.json", result)
    return result


def bench_is_current(path: Path, options: BenchOptions) -> bool:
    """Whether bench.json at `path` was written with `options`, as far as a cheap look tells:
    only default options are recognised (their key set and a null request_goodput)."""
    if options != BenchOptions():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (isinstance(data, dict) and list(data) == bench_keys(options)
            and data.get("request_goodput") is None)


def rewrite_bench(out_dir: Path, rows: Sequence[Mapping[str, Any]],
                  options: BenchOptions) -> list[dict[str, Any]]:
    """Rewrite bench.json of every run of `rows` (reused runs too) not already written with
    `options` (with the default options a reused run's records are not read); the rows come
    back with `request_goodput` (req/s) added when `options` has a goodput SLO."""
    updated = []
    for row in rows:
        path = run_path(out_dir, str(row["run"]))
        if bench_is_current(path / "bench.json", options):
            updated.append(dict(row))
            continue
        goodput = write_bench(path, options)["request_goodput"]
        extra = {"request_goodput": math.nan if goodput is None else goodput} \
            if options.goodput else {}
        updated.append({**row, **extra})
    return updated
