"""Simulator speed: the whole Azure conv trace (19,366 requests) with ORCA on Llama-2-7B / A100-80GB.

Prints wall seconds, simulated requests per wall-second and simulated iterations per wall-second.
Vidur, the strongest public peer, simulates about 1,000 requests per wall-second; the target here
is at least 5,000 (the whole trace in under 4 s).

    python benchmarks/sim_speed.py [--policy orca] [--instances 1] [--repeat 3]
        [--cost-model roofline|stage|profile]

`--cost-model` picks `cluster.cost_model.kind` (default stage, the simulator's default); `profile` reads
the shared A100 profile (`../shared/data/profiles`, or $SIMSERVE_DATA_DIR/profiles).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies.simulate import simulate  # noqa: E402
from sim.cluster.spec import ClusterSpec, build_executors  # noqa: E402
from sim.util.errors import ConfigError, TraceError  # noqa: E402
from traces.paths import default_data_dir  # noqa: E402
from traces.registry import load_trace, shared_trace_path  # noqa: E402

VIDUR_REQ_PER_S = 1_000.0  # requests simulated per wall-second by Vidur on a comparable machine
COST_MODELS = ("roofline", "stage", "profile")  # --cost-model choices (cluster.cost_model.kind)


def cost_model_options(kind: str) -> dict:
    """`cluster.cost_model` for a --cost-model choice."""
    if kind == "roofline":
        return {"kind": "roofline"}
    if kind == "stage":
        return {"kind": "stage"}
    return {"kind": "profile", "profiles": str(default_data_dir() / "profiles")}


def check_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Usage error (exit 2) naming the flag, before the trace is read."""
    from policies.registry import policy_names

    if args.policy not in policy_names():
        ap.error(f"--policy={args.policy!r}: unknown; known: {', '.join(policy_names())}")
    for flag in ("instances", "repeat"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag}={getattr(args, flag)}: must be >= 1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="orca")
    ap.add_argument("--instances", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    ap.add_argument("--cost-model", choices=COST_MODELS, default="stage",
                    help="cluster.cost_model.kind (profile: the shared A100 profile)")
    args = ap.parse_args()
    check_args(ap, args)
    try:
        trace = load_trace(shared_trace_path("azure_conv"))
        executors = build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB",
                                                num_instances=args.instances,
                                                cost_model=cost_model_options(args.cost_model)))
    except (ConfigError, TraceError, FileNotFoundError) as exc:  # the shared data is missing
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    best = None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        res = simulate(trace, args.policy, {}, executors)
        wall = time.perf_counter() - t0
        if best is None or wall < best[0]:
            best = (wall, res)
    wall, res = best
    s = res.summary
    print(f"trace: azure_conv, {len(trace)} requests; policy {args.policy}; "
          f"{args.instances} x llama-2-7b on A100-80GB; cost model {args.cost_model}")
    print(f"wall seconds:                   {wall:.2f}")
    print(f"simulated requests / wall-s:    {len(trace) / wall:,.0f} "
          f"({len(trace) / wall / VIDUR_REQ_PER_S:.1f}x Vidur's ~1,000)")
    print(f"simulated iterations / wall-s:  {s['num_iterations'] / wall:,.0f} "
          f"({s['num_iterations']:,} iterations in {len(res.steps):,} steps)")
    print(f"simulated time: {s['duration_s']:.0f} s; completed {s['completed']}; "
          f"mean E2E {s['mean_e2e_s']:.2f} s")


if __name__ == "__main__":
    main()
