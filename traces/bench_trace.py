"""A serving benchmark's requests as a workload: trace format `vllm_bench`.

    workload: {trace: {path: BENCH.json}}                     # format inferred from the keys
    workload: {trace: {path: BENCH.json, format: vllm_bench}}

A `vllm bench serve --save-result --save-detailed` JSON (or SGLang's `bench_serving
--output-details` JSON lines, its last run) is read by `traces.bench_results`: its succeeded
requests with their input and output lengths, at the arrivals it records (`start_times`), or
rebuilt as the tool drew them (`request_rate`, `burstiness`, the tool's default seed, then
`max_concurrency`): see `bench_note`. Re-timed at other rates like any trace (`retime: gamma`
with the file's burstiness: `servesim run --workload BENCH.json --request-rate R` sets it).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from traces.bench_results import BenchResult, read_bench_result
from traces.files import open_text

FORMAT = "vllm_bench"  # the trace format's name (traces/registry.py)
SNIFF_CHARS = 1 << 20  # characters read to recognise a benchmark result by its keys
MARKERS = ('"ttfts"', '"input_lens"', '"mean_ttft_ms"', '"request_throughput"')  # its keys


def load_bench_trace(path: str | Path, *, limit: int | None = None) -> pd.DataFrame:
    """The benchmark's succeeded requests (arrival_s, prompt_tokens, output_tokens), by arrival;
    the first `limit` of them when given. `attrs["bench"]` says how the arrivals were made."""
    result = read_bench_result(path)
    df = result.trace.loc[:, ["arrival_s", "prompt_tokens", "output_tokens"]]
    df = df.sort_values("arrival_s", kind="stable").reset_index(drop=True)
    if limit is not None:
        df = df.head(limit)
    df.attrs["bench"] = bench_note(result)
    return df


def looks_like_bench(path: Path) -> bool:
    """True when the file's first SNIFF_CHARS characters hold a benchmark result's keys."""
    with open_text(path, FORMAT) as fh:
        head = fh.read(SNIFF_CHARS)
    return any(marker in head for marker in MARKERS)


def bench_note(result: BenchResult) -> str:
    """One line on the requests and arrivals a benchmark result gives a run."""
    rate = "inf" if result.request_rate == float("inf") else f"{result.request_rate:g} req/s"
    how = {"measured": "its measured send times (start_times)",
           "all_at_zero": "all at 0 (request_rate inf)",
           "seeded": (f"no send times in the file: redrawn as the benchmark tool draws them "
                      f"(burstiness {result.burstiness:g}, the tool's default seed): the run's "
                      f"rate and burstiness, not its exact times")}[result.arrivals]
    conc = "" if result.max_concurrency is None else (
        f", at most {result.max_concurrency} in flight")
    return (f"{result.source}: {len(result.trace)} requests ({result.num_failed} failed left "
            f"out) at {rate}{conc}; arrivals: {how}")
