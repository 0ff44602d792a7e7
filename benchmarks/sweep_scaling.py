"""Sweep scaling: one sweep of 40 runs at 1 and 2 local processes, and on a local Ray instance.

    python benchmarks/sweep_scaling.py [--jobs 1 2] [--no-ray] [--requests 400]

Prints wall seconds per mode and the speed-up over one process.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from experiments.run import main as run_main  # noqa: E402


def sweep_config(num_requests: int) -> dict:
    """4 policies x 5 rates x 2 seeds = 40 runs."""
    return {"name": "scaling",
            "workload": {"synthetic": {"num_requests": num_requests, "lengths": "sharegpt"}},
            "cluster": {"model": "llama-2-7b", "gpu": "A100-80GB"},
            "policies": [{"name": "vanilla"}, {"name": "orca"}, {"name": "vllm_v0"},
                         {"name": "sarathi"}],
            "request_rates": [1, 2, 4, 8, 16], "seeds": [0, 1]}


def timed(cfg_path: Path, out: Path, *flags: str) -> float:
    start = time.perf_counter()
    code = run_main([str(cfg_path), "--out", str(out), "--no-progress", *flags])
    if code != 0:
        raise SystemExit(f"sweep failed with exit code {code}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--requests", type=int, default=400)
    args = ap.parse_args()
    for jobs in args.jobs:
        if jobs < 1:
            ap.error(f"--jobs={jobs}: must be >= 1")
    if args.requests < 1:
        ap.error(f"--requests={args.requests}: must be >= 1")
    results: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "scaling.yaml"
        cfg.write_text(yaml.safe_dump(sweep_config(args.requests)))
        for jobs in args.jobs:
            results.append((f"{jobs} process(es)", timed(cfg, Path(tmp) / f"j{jobs}",
                                                        "--jobs", str(jobs))))
        if not args.no_ray:
            try:
                import ray
            except ImportError:
                print("ray not installed: skipping the Ray mode (pip install -e '.[ray]')")
            else:
                results.append(("ray (local)", timed(cfg, Path(tmp) / "ray", "--ray")))
                ray.shutdown()
    base = results[0][1]
    print(f"sweep of 40 runs x {args.requests} requests")
    for name, wall in results:
        print(f"{name:>16}: {wall:6.2f} s wall, speed-up {base / wall:.2f}x")


if __name__ == "__main__":
    main()
