"""CI regression on policy metrics: a small canonical sweep over every registered policy.

    python -m experiments.regression [--update-baselines] [--jobs N]

Runs the canonical sweep (fixed seeds, a short synthetic workload, every registered policy with
its defaults) and compares each run's metrics with the committed baseline
(`tests/baselines/regression.json`). Simulations are deterministic for a seed, so tolerances are
tight; a change that moves a metric is reported with the policy, the metric and by how much.
After an intended change, `--update-baselines` rewrites the baseline.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

BASELINE = Path(__file__).resolve().parents[1] / "tests" / "baselines" / "regression.json"
# metric -> relative tolerance
TOLERANCES: dict[str, float] = {
    "completed": 0.0, "rejected": 0.0, "failed": 0.0, "num_oom_events": 0.0,
    "num_preemptions": 0.0, "num_computed_tokens": 0.0, "num_padding_tokens": 0.0,
    "request_throughput": 1e-6, "output_throughput": 1e-6, "mean_e2e_s": 1e-6,
    "p99_e2e_s": 1e-6, "mean_ttft_s": 1e-6, "p99_ttft_s": 1e-6, "mean_tpot_s": 1e-6,
    "p99_itl_s": 1e-6, "mean_batch_size": 1e-6, "busy_fraction": 1e-6,
}


CLUSTER_OF = {"disagg": {"cluster": {"num_instances": 2}}}  # policies needing more than one


def canonical_config() -> dict[str, Any]:
    """The regression sweep: every registered policy, defaults, two loads, one seed."""
    from policies.registry import policy_names

    return {
        "name": "regression",
        "workload": {"synthetic": {"num_requests": 150, "lengths": "sharegpt"}},
        "cluster": {"model": "llama-2-7b", "gpu": "A100-40GB"},
        "policies": [{"name": name, **CLUSTER_OF.get(name, {})} for name in policy_names()],
        "request_rates": [1.0, 4.0],
        "seeds": [0],
    }


@dataclass(frozen=True)
class Moved:
    """A metric that left its tolerance."""

    run: str  # <policy>__rate<r>__seed<s>
    metric: str
    baseline: float
    value: float

    def __str__(self) -> str:
        rel = (self.value - self.baseline) / abs(self.baseline) if self.baseline else math.inf
        return (f"{self.run}: {self.metric} moved {self.baseline:.6g} -> {self.value:.6g} "
                f"({rel:+.3%})")


def run_canonical(jobs: int = 1) -> dict[str, dict[str, float]]:
    """Run the canonical sweep into a temporary folder; metrics per run."""
    from experiments.run import main as run_main
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "regression.yaml"
        path.write_text(yaml.safe_dump(canonical_config()))
        code = run_main([str(path), "--out", str(Path(tmp) / "out"), "--no-progress",
                         "--jobs", str(jobs)])
        if code != 0:
            raise RuntimeError(f"the regression sweep failed (exit {code})")
        df = pd.read_csv(Path(tmp) / "out" / "summary.csv")
    return {row["run"]: {m: float(row[m]) for m in TOLERANCES} for _, row in df.iterrows()}


def compare(baseline: Mapping[str, Mapping[str, float]],
            fresh: Mapping[str, Mapping[str, float]]) -> tuple[list[Moved], list[str]]:
    """Metrics outside tolerance, and runs missing on either side."""
    moved, missing = [], []
    for run in sorted(set(baseline) | set(fresh)):
        if run not in baseline or run not in fresh:
            side = "baseline" if run not in baseline else "fresh run"
            missing.append(f"{run}: no {side}")
            continue
        for metric, tol in TOLERANCES.items():
            a, b = baseline[run].get(metric, math.nan), fresh[run].get(metric, math.nan)
            if math.isnan(a) and math.isnan(b):
                continue
            if not math.isclose(a, b, rel_tol=tol, abs_tol=1e-12):
                moved.append(Moved(run, metric, a, b))
    return moved, missing


def load_baseline(path: Path = BASELINE) -> dict[str, dict[str, float]]:
    data = json.loads(path.read_text())
    return {run: {k: (math.nan if v is None else v) for k, v in m.items()}
            for run, m in data.items()}


def save_baseline(metrics: Mapping[str, Mapping[str, float]], path: Path = BASELINE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = {run: {k: (None if isinstance(v, float) and math.isnan(v) else v)
                   for k, v in m.items()} for run, m in metrics.items()}
    path.write_text(json.dumps(plain, indent=1, sort_keys=True) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compare policy metrics with the baseline.")
    ap.add_argument("--update-baselines", action="store_true")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args(argv)
    if args.jobs < 1:
        ap.error(f"--jobs={args.jobs}: must be >= 1")
    fresh = run_canonical(args.jobs)
    if args.update_baselines:
        save_baseline(fresh)
        print(f"baseline rewritten: {BASELINE} ({len(fresh)} runs)")
        return 0
    moved, missing = compare(load_baseline(), fresh)
    for line in [*missing, *map(str, moved)]:
        print(line)
    if moved or missing:
        print(f"{len(moved)} metric(s) moved, {len(missing)} run(s) missing; after an intended "
              "change run: python -m experiments.regression --update-baselines")
        return 1
    print(f"all {len(fresh)} runs match the baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
