"""What kind of JSON file a user passed, for errors that name it and say what was expected.

`describe_json(data)` looks only at the keys of a file's top-level JSON object and names the
file kinds the project reads or writes, so that passing the wrong one anywhere (a benchmark
result as a calibration, a calibration as a workload, servesim's own bench.json where per-request
results are needed) says what the file is instead of which key it lacks.
"""

from __future__ import annotations

from typing import Any, Mapping

BENCH_LISTS = ("input_lens", "output_lens", "ttfts", "itls")  # a detailed result's lists
BENCH_SUMMARY = ("request_throughput", "mean_ttft_ms", "completed")  # any bench result
EXPECTED_BENCH = ("a detailed serving benchmark result: `vllm bench serve --save-result "
                  "--save-detailed` (or SGLang's `bench_serving --output-details`), with "
                  "per-request input_lens, output_lens, ttfts and itls")
EXPECTED_CALIBRATION = ("a calibration file: `servesim calibrate BENCH.json --out FILE` or "
                        "`python -m real.calibrate PROFILE.csv --out FILE`")
OLD_BENCH_CALIBRATION = "servesim.bench_calibration"  # format of bench_calibrate before v2


def describe_json(data: Any) -> str:
    """A short phrase naming what the JSON value `data` is ('a vLLM benchmark result ...')."""
    if not isinstance(data, Mapping):
        return f"a JSON {type(data).__name__}, not an object"
    keys = set(data)
    if data.get("format") == OLD_BENCH_CALIBRATION:
        return ("a calibration written by an older `bench_calibrate` (no model / device "
                "sections)")
    if {"model", "device", "roofline"} <= keys:
        return "a calibration file"
    if set(BENCH_LISTS) <= keys:
        return "a detailed serving benchmark result (per-request lists)"
    if str(data.get("backend", "")).startswith("servesim") or \
            str(data.get("endpoint_type", "")).startswith("servesim"):
        return ("servesim's own bench.json of a simulated run (summary metrics only, no "
                "per-request lists)")
    if keys & set(BENCH_SUMMARY):
        return ("a serving benchmark result without per-request lists (saved without "
                "--save-detailed)")
    if {"engine", "decode", "prefill"} <= keys:
        return "a real-engine benchmark (`python -m benchmarks.real_engine`), not a serving one"
    if data.get("format") == "servesim.stage_params":
        return "a stage parameter file (`python -m experiments.fidelity.fit_gpu`)"
    if "architectures" in keys or "hidden_size" in keys:
        return "a model config.json"
    shown = ", ".join(sorted(map(str, keys))[:6]) or "none"
    return f"a JSON object of another kind (keys: {shown}{', ...' if len(keys) > 6 else ''})"


def is_detailed_bench(data: Mapping[str, Any]) -> bool:
    """True when `data` has a detailed benchmark result's per-request lists."""
    return isinstance(data, Mapping) and set(BENCH_LISTS) <= set(data)
