"""Engine scale: 10k, 100k and 1M requests through `simulate()` alone, on one Llama-2-7B /
A100-80GB instance. The user's command, whole, is `benchmarks/scale.py`; this one times the
engine without the sweep around it (no summaries past the engine's, no bench.json), to compare
trees from before the user's path existed.

Lengths are the Azure 2023 conversation trace's (prompt, output) pairs resampled jointly with a
seeded numpy Generator; arrivals are Poisson at `--rate` (2 req/s). Every (policy, size) runs in
a fresh subprocess, which reports the wall seconds of the simulation, simulated requests per
wall-second and the peak RSS of the whole process (`ru_maxrss`). The last column is the cost per
request (wall / requests) relative to the smallest size of the same policy: 1.0 is linear.
Prints figures, asserts nothing about speed.

    python benchmarks/scale_engine.py [--sizes 10000,100000,1000000]
        [--policies vllm_v0,vllm,sarathi,orca] [--cost-model roofline] [--rate 2] [--seed 0]
        [--in-memory] [--compiled]

The cost model is always named (`cluster.cost_model: {kind: roofline}` by default), so the
figures do not move when the default kind changes. `vllm_v0` (vLLM's v0 scheduler) resolves to the
registered name `vllm_v0`, else to `vllm` (the name it had before the rename); `vllm` is
today's V1 scheduler (prefix caching on, as V1 defaults), timed only in trees that have both.
To time another tree, set PYTHONPATH to it: the script then imports `sim`, `policies`, `traces`
from there. `--compiled` times the compiled hot modules (sim/compiled.py): it builds them first
(`scripts/compile.py`, into .compiled) when they are missing or stale, and runs every child with
SERVESIM_COMPILED=1; the header says whether they ran.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(ROOT))

COST_MODELS = ("roofline", "stage")  # --cost-model choices (cluster.cost_model.kind)
BATCH_CAP = 128  # running requests per instance (max_num_seqs / max_batch_size)
LABELS = {"vllm_v0": "vllm_v0 (paged, v0)",  # printed names of resolved policies
          "vllm": "vllm (V1, prefix cache)"}


@dataclass(frozen=True)
class Figures:
    """One run's figures, as a child process reports them."""

    policy: str  # name asked for (vllm_v0, sarathi, orca)
    resolved: str  # registered name it ran as
    size: int  # requests
    wall_s: float  # seconds simulating (trace built before)
    total_s: float  # seconds of the whole child process, imports and trace included
    peak_rss_mib: float  # peak resident set of the whole child process, MiB
    completed: int  # requests finished
    num_steps: int  # Steps executed
    sim_root: str  # directory the `sim` package was imported from
    compiled: bool = False  # the compiled hot modules ran (SERVESIM_COMPILED)


def cost_model_options(kind: str) -> dict:
    """`cluster.cost_model` for a --cost-model choice, its kind named (not the default's)."""
    return {"kind": kind}


def resolve_policy(name: str) -> str:
    """The registered name of `name`: vllm_v0 falls back to `vllm` before the rename."""
    from policies.registry import policy_names

    names = policy_names()
    if name == "vllm" and "vllm_v0" not in names:
        raise SystemExit("this tree's `vllm` is the v0 scheduler (before the rename): time it "
                         "as vllm_v0")
    if name in names:
        return name
    if name == "vllm_v0" and "vllm" in names:
        return "vllm"
    raise SystemExit(f"policy {name!r} is not registered; known: {', '.join(names)}")


def policy_params(resolved: str) -> dict:
    """The batch cap under each policy's own parameter name."""
    if resolved in ("orca",):
        return {"max_batch_size": BATCH_CAP}
    return {"max_num_seqs": BATCH_CAP}


def build_trace(size: int, rate: float, seed: int):
    """`size` Azure conv (prompt, output) pairs resampled, with Poisson arrivals at `rate`."""
    import numpy as np
    import pandas as pd

    from traces.arrivals import arrivals
    from traces.lengths import resample_lengths
    from traces.registry import load_trace, shared_trace_path

    rng = np.random.default_rng(seed)
    lengths = resample_lengths(load_trace(shared_trace_path("azure_conv")), size, rng)
    return pd.DataFrame({"arrival_s": arrivals(rate, size, rng=rng),
                         "prompt_tokens": lengths["prompt_tokens"],
                         "output_tokens": lengths["output_tokens"]})


def child(policy: str, size: int, rate: float, seed: int, cost_model: str, t_start: float,
          in_memory: bool = False) -> None:
    """Run one simulation and print its Figures as one JSON line. Steps are streamed to a
    parquet file in a temporary directory, as `experiments.run --out` does, unless
    `in_memory` (the steps frame then stays in memory, as `policies.simulate.simulate` gives)."""
    import tempfile

    import sim
    from policies.simulate import simulate
    from sim.cluster.spec import ClusterSpec, build_executors

    resolved = resolve_policy(policy)
    trace = build_trace(size, rate, seed)
    executors = build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB",
                                            cost_model=cost_model_options(cost_model)))
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        stream = {} if in_memory else {"steps_path": Path(tmp) / "steps.parquet"}
        t0 = time.perf_counter()
        res = simulate(trace, resolved, policy_params(resolved), executors, seed=seed, **stream)
        wall = time.perf_counter() - t0
        num_steps = res.num_steps if hasattr(res, "num_steps") else len(res.steps)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    fig = Figures(policy, resolved, size, wall, time.perf_counter() - t_start, rss,
                  int(res.summary["completed"]), num_steps,
                  str(Path(sim.__file__).resolve().parents[1]), compiled_active())
    print(json.dumps(fig.__dict__))


def compiled_active() -> bool:
    """Whether this process runs the compiled hot modules (False in trees without them)."""
    try:
        from sim.compiled import is_active
    except ImportError:
        return False
    return is_active()


def ensure_compiled() -> None:
    """Build the compiled hot modules into .compiled unless a current build is there (every
    package holding one of them checked, sub-packages included)."""
    from sim.compiled import DEFAULT_DIR, MODULES, CompiledBuildError, check_build

    try:
        for package in sorted({name.rpartition(".")[0] for name in MODULES}):
            check_build(DEFAULT_DIR, package, ROOT.joinpath(*package.split(".")))
    except CompiledBuildError as why:
        print(f"building the compiled hot modules ({why})", flush=True)
        subprocess.run([sys.executable, str(ROOT / "scripts" / "compile.py")], check=True)


def run_child(policy: str, size: int, args: argparse.Namespace) -> Figures:
    """One run in a fresh interpreter (so its peak RSS is its own)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", policy, str(size),
           "--rate", str(args.rate), "--seed", str(args.seed), "--cost-model", args.cost_model]
    cmd += ["--in-memory"] if args.in_memory else []
    env = dict(os.environ)
    env["SERVESIM_COMPILED"] = "1" if args.compiled else "0"
    data = ROOT.parent / "shared" / "data"  # this checkout's traces, whichever tree is timed
    if "SIMSERVE_DATA_DIR" not in env and data.is_dir():
        env["SIMSERVE_DATA_DIR"] = str(data)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"{policy} x {size} failed:\n{proc.stderr}")
    return Figures(**json.loads(proc.stdout.strip().splitlines()[-1]))


HEADER = (f"{'policy':<22}{'requests':>10}{'wall s':>9}{'req/s':>10}{'peak RSS MiB':>14}"
          f"{'cost/req x':>12}{'process s':>11}")


def row(f: Figures, base: dict[str, float]) -> str:
    """One printed line; `base` holds each policy's first cost per request (seconds)."""
    per = f.wall_s / f.size
    base.setdefault(f.policy, per)
    label = LABELS.get(f.policy, f.policy)
    return (f"{label:<22}{f.size:>10,}{f.wall_s:>9.2f}{f.size / f.wall_s:>10,.0f}"
            f"{f.peak_rss_mib:>14,.0f}{per / base[f.policy]:>12.2f}{f.total_s:>11.2f}")


def size_list(text: str) -> list[int]:
    """`--sizes`: comma-separated request counts, each >= 1 (an argparse type)."""
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated integers") from None
    if min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: each size must be >= 1")
    return sizes


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage error (exit 2) for an unknown policy or a rate <= 0, before any child runs."""
    for name in args.policies.split(","):
        try:
            resolve_policy(name)
        except SystemExit as why:
            ap.error(f"--policies: {why.code}")
    if not args.rate > 0:  # NaN too
        ap.error(f"--rate={args.rate}: must be > 0 (req/s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=size_list, default="10000,100000,1000000",
                    help="requests, comma-separated")
    ap.add_argument("--policies", default="vllm_v0,vllm,sarathi,orca", help="comma-separated")
    ap.add_argument("--cost-model", choices=COST_MODELS, default="roofline",
                    help="cluster.cost_model.kind, always passed explicitly")
    ap.add_argument("--rate", type=float, default=2.0, help="Poisson arrivals, req/s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--in-memory", action="store_true",
                    help="keep the steps frame in memory (default: streamed to a temporary file)")
    ap.add_argument("--compiled", action="store_true",
                    help="time the compiled hot modules (built first when missing or stale)")
    ap.add_argument("--child", nargs=2, metavar=("POLICY", "SIZE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.rate, args.seed, args.cost_model,
              time.perf_counter(), args.in_memory)
        return
    check_args(ap, args)
    sizes = args.sizes
    os.environ.pop("SERVESIM_COMPILED", None)  # each child is told which modules to run
    if args.compiled:
        ensure_compiled()
    print(f"Llama-2-7B on 1 x A100-80GB; cost model {args.cost_model}; Poisson {args.rate:g} "
          f"req/s; batch cap {BATCH_CAP}; seed {args.seed}", flush=True)
    base: dict[str, float] = {}
    for policy in args.policies.split(","):
        for size in sizes:
            f = run_child(policy, size, args)
            if not base:
                print(f"sim imported from {f.sim_root}; compiled hot modules: "
                      f"{'yes' if f.compiled else 'no'}\n{HEADER}", flush=True)
            if size == sizes[0]:
                print(f"# {policy} runs as registered {f.resolved!r}", flush=True)
            print(row(f, base), flush=True)

if __name__ == "__main__":
    main()
