"""Scale on the user's path: `python -m experiments.run CONFIG --out DIR` as one whole process.

The command the README teaches, with its defaults: the default cost model (nothing named), the
default outputs (records, events, steps, instances, summary, bench.json, the table) and the
policy's default parameters. The workload is the built-in synthetic one (`workload.synthetic`,
ShareGPT-like lengths, Poisson arrivals at `--rate`), one Llama-2-7B instance on an A100-80GB.
Every (policy, size) runs in a fresh process; the parent reads the child's own peak RSS from
`os.wait4` and its wall clock, and the run's phases from its host_timing.json (`phases_s`,
seconds the run measured itself):

  simulate  the engine: arrivals, scheduling, the cost model, every step
  summarise the summary (percentiles, $ and J, SLO, steady state, classes) and bench.json's
            figures, read from the records a few columns at a time
  write     the run's files: steps, records and events moved or written in row groups,
            instances, summary, config (the workload build, ms, is in `rest`)
  rest      everything else in the process: interpreter start, imports, config checks, the
            workload, the sweep's summary.csv and table

Prints figures, asserts nothing about speed. `cost/req x` is the process's wall per request
against the smallest size of the same policy (1.0 is linear).

    python benchmarks/scale.py [--sizes 10000,100000,1000000]
        [--policies vllm,vllm_v0,sarathi,orca] [--rate 2] [--seed 0] [--compiled] [--keep DIR]

`--compiled` runs the children with SERVESIM_COMPILED=1 (built first into .compiled when missing
or stale). Each run's folder is removed after it is read unless `--keep DIR` names where to
leave them. `benchmarks/scale_engine.py` times `simulate()` alone (the engine without the sweep
around it), for trees from before this path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.scale_engine import ensure_compiled, size_list  # noqa: E402

POLICIES = "vllm,vllm_v0,sarathi,orca"  # today's scheduler first: the one users pick


@dataclass(frozen=True)
class RunFigures:
    """One `experiments.run` process, as the parent measured it."""

    policy: str  # registered policy name
    size: int  # requests
    total_s: float  # seconds of the whole process
    run_s: float  # seconds inside the sweep's timer (host_timing.json wall_s)
    peak_rss_mib: float  # the child's own peak resident set, MiB
    completed: int  # requests finished (summary.json)
    phases_s: dict  # seconds per phase (host_timing.json phases_s; empty in older trees)

    def phase(self, *names: str) -> float:
        """Seconds of the named phases together (NaN when the run did not report them)."""
        if not self.phases_s:
            return float("nan")
        return sum(float(self.phases_s.get(n, 0.0)) for n in names)


def config_text(policy: str, size: int, rate: float, seed: int) -> str:
    """The run's config: the quickstart's shape with one policy, one rate, one seed."""
    return (f"name: scale_{policy}_{size}\n"
            f"workload:\n  synthetic: {{num_requests: {size}, arrival: poisson, "
            f"lengths: sharegpt}}\n"
            f"cluster: {{model: llama-2-7b, gpu: A100-80GB, num_instances: 1}}\n"
            f"policies:\n  - name: {policy}\n"
            f"request_rates: [{rate!r}]\nseeds: [{seed}]\n")


def run_one(policy: str, size: int, args: argparse.Namespace, keep: Path | None) -> RunFigures:
    """`python -m experiments.run` on the run's config in a fresh process; its figures."""
    work = Path(tempfile.mkdtemp(prefix="scale-run-"))
    try:
        config = work / "config.yaml"
        config.write_text(config_text(policy, size, args.rate, args.seed), encoding="utf-8")
        out = (keep / f"{policy}_{size}") if keep else work / "out"
        env = dict(os.environ, SERVESIM_COMPILED="1" if args.compiled else "0")
        data = ROOT.parent / "shared" / "data"
        if "SIMSERVE_DATA_DIR" not in env and data.is_dir():
            env["SIMSERVE_DATA_DIR"] = str(data)
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "experiments.run", str(config),
                                 "--out", str(out)], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        total = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read() if proc.stderr else ""
        if proc.returncode:
            raise SystemExit(f"{policy} x {size} failed (exit {proc.returncode}):\n{err}")
        run_dir = next((out / "runs").iterdir())
        timing = json.loads((run_dir / "host_timing.json").read_text(encoding="utf-8"))
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        return RunFigures(policy, size, total, float(timing["wall_s"]),
                          usage.ru_maxrss / 1024.0, int(summary["completed"]),
                          dict(timing.get("phases_s") or {}))
    finally:
        shutil.rmtree(work, ignore_errors=True)


HEADER = (f"{'policy':<10}{'requests':>11}{'wall s':>9}{'simulate':>10}{'summarise':>10}"
          f"{'write':>8}{'rest s':>8}{'req/s':>10}{'peak RSS MiB':>14}{'cost/req x':>12}"
          f"{'done':>11}")


def row(f: RunFigures, base: dict[str, float]) -> str:
    """One printed line; `base` holds each policy's first wall per request (seconds)."""
    per = f.total_s / f.size
    base.setdefault(f.policy, per)
    sim, summ, write = f.phase("simulate"), f.phase("summarise", "bench"), f.phase("write")
    rest = f.total_s - (sim + summ + write if f.phases_s else f.run_s)
    return (f"{f.policy:<10}{f.size:>11,}{f.total_s:>9.2f}{sim:>10.2f}{summ:>10.2f}"
            f"{write:>8.2f}{rest:>8.2f}{f.size / f.total_s:>10,.0f}{f.peak_rss_mib:>14,.0f}"
            f"{per / base[f.policy]:>12.2f}{f.completed:>11,}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=size_list, default="10000,100000,1000000",
                    help="requests, comma-separated")
    ap.add_argument("--policies", default=POLICIES, help="comma-separated registered names")
    ap.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals, req/s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compiled", action="store_true",
                    help="run the compiled hot modules (built first when missing or stale)")
    ap.add_argument("--keep", type=Path, help="leave each run's folder under this directory")
    args = ap.parse_args(argv)
    from policies.registry import policy_names

    unknown = [p for p in args.policies.split(",") if p not in policy_names()]
    if unknown:
        ap.error(f"--policies: {', '.join(unknown)} not registered; known: "
                 f"{', '.join(policy_names())}")
    if not args.rate > 0:
        ap.error(f"--rate={args.rate}: must be > 0 (req/s)")
    if args.compiled:
        ensure_compiled()
    print(f"python -m experiments.run on Llama-2-7B, 1 x A100-80GB, default cost model and "
          f"outputs; synthetic sharegpt lengths, Poisson {args.rate:g} req/s, seed {args.seed}; "
          f"{'compiled' if args.compiled else 'pure Python'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    print(HEADER, flush=True)
    base: dict[str, float] = {}
    for policy in args.policies.split(","):
        for size in args.sizes:
            print(row(run_one(policy, size, args, args.keep), base), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
