"""Where a policy on the HF engine spends its busy time (docs/magnus.md, "Magnus vs CCB").

    python -m experiments.papers.magnus_ccb_breakdown CONFIG --label CCB-HF --rate 4 [--seed 0]

Re-simulates one run of an experiment config (the workload, cluster and policy entry that
`experiments.run` would run) with each HF-engine executor wrapped, and splits the modelled time of
every completed iteration into decode forwards, joiners' prefills and re-layout copies
(sim/cluster/hf_continuous.py), static prefills, and time lost to OOMs; it also reports the share of all
time that is the engine's host overhead (`step_overhead_s` per forward), the mean rows per decode
iteration, and the share of decode KV reads that are the engine's padding (rows x the longest
cache against each row's own cache; a static policy's Steps carry their prompt padding already,
counted in the records' num_padding_tokens, not here).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from typing import Any, Sequence

import numpy as np

from experiments.config.load import load_config
from experiments.sweep.workload import build_workload, load_base_trace
from sim.cluster.hf_continuous import mixed_shape
from sim.cluster.hf_static import HFStaticExecutor
from sim.core.executor import Step, StepResult
from sim.util.errors import ConfigError, TraceError

PARTS = ("decode", "join_prefill", "relayout", "static_prefill", "oom_lost")  # time buckets


class BreakdownExecutor:
    """An HF-engine executor that adds each step's time, split by PARTS, to `seconds`."""

    def __init__(self, inner: HFStaticExecutor):
        self.inner = inner  # the engine that times the steps
        self.name = inner.name  # the engine's label
        self.seconds: Counter[str] = Counter()  # seconds per PARTS entry
        self.counts: Counter[str] = Counter()  # forwards, decode iterations, rows, KV reads

    @property
    def kv_capacity_tokens(self) -> int:
        return self.inner.kv_capacity_tokens

    def instance_info(self, instance_id: int) -> Any:
        return self.inner.instance_info(instance_id)

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        result = self.inner.execute(step, until_s)
        done = result.num_iterations
        if done:
            self._add(step, done)
        self.seconds["oom_lost"] += result.duration_s - (result.iteration_ends_s[-1]
                                                         if done else 0.0)
        return result

    def _add_decodes(self, rows: int, first: int, iterations: int, own: float) -> None:
        """`iterations` padded decodes from `first` cached tokens; `own`: rows' own reads."""
        self.seconds["decode"] += float(self.inner.decode_times(rows, first, iterations).sum())
        self.counts["forwards"] += iterations
        self.counts["decode_iterations"] += iterations
        self.counts["decode_rows"] += rows * iterations
        padded = rows * iterations * (first + 1) + rows * iterations * (iterations - 1) // 2
        self.counts["kv_padded"] += padded
        self.counts["kv_own"] += own

    def _add(self, step: Step, done: int) -> None:
        """Split the first `done` iterations of `step` into PARTS."""
        ex, shape = self.inner, mixed_shape(step)
        after_first = np.add(step.num_new_tokens, step.num_context_tokens)  # cached, per row
        tail = done - 1  # iterations after the first
        own_tail = float(after_first.sum()) * tail + step.num_seqs * tail * (tail + 1) / 2
        if shape is None:  # a static batch: padded prefill, then padded decodes
            prompt, context = max(step.num_new_tokens), max(step.num_context_tokens)
            self.seconds["static_prefill"] += ex.prefill_seconds(step.num_seqs, prompt, context)
            self.counts["forwards"] += 1
            if tail:
                self._add_decodes(step.num_seqs, context + prompt, tail, own_tail)
            return
        own_first = sum(c + 1 for n, c in zip(step.num_new_tokens, step.num_context_tokens)
                        if n == 1 and c > 0)
        self._add_decodes(shape.num_decode, shape.decode_context, 1, own_first)
        if shape.num_join:
            self.seconds["join_prefill"] += ex.prefill_seconds(shape.num_join, shape.join_prompt,
                                                               shape.join_context)
            self.seconds["relayout"] += ex.kv_copy_seconds(shape.num_rows, shape.longest)
            self.counts["forwards"] += 1
            self.counts["joins"] += 1
        if tail:
            self._add_decodes(shape.num_rows, shape.longest, tail, own_tail)


def breakdown(executors: Sequence[BreakdownExecutor]) -> dict[str, float]:
    """Shares of the busy time per PARTS entry and the host overhead, rows per decode
    iteration, the padding share of decode KV reads, and the join steps, over all instances."""
    seconds: Counter[str] = sum((e.seconds for e in executors), Counter())
    counts: Counter[str] = sum((e.counts for e in executors), Counter())
    busy = sum(seconds.values())
    overhead = counts["forwards"] * executors[0].inner.params.step_overhead_s
    out = {f"share_{p}": seconds[p] / busy for p in PARTS}
    out.update(busy_s=busy, share_host_overhead=overhead / busy, joins=counts["joins"],
               rows_per_decode=counts["decode_rows"] / max(1, counts["decode_iterations"]),
               padding_share_of_decode_kv=1.0 - counts["kv_own"] / max(1, counts["kv_padded"]))
    return out


def run_breakdown(config: str, label: str, rate: float, seed: int,
                  overrides: Sequence[str] = ()) -> tuple[dict[str, float], dict[str, Any]]:
    """Simulate one run of `config` (policy entry `label`) and return its breakdown and summary."""
    from experiments.config.backend import build_executors
    from policies.simulate import simulate
    from sim.cost.overhead import overhead_kwargs

    cfg = load_config(config, overrides)
    entries = {e.label: e for e in cfg.policies}
    if label not in entries:
        raise ConfigError("--label", label, f"no policy entry of {config} has it; labels: "
                                            f"{', '.join(entries)}")
    cluster = cfg.cluster_for(entries[label])
    executors = [BreakdownExecutor(e) for e in build_executors(cluster)
                 if isinstance(e, HFStaticExecutor)]
    if not executors:
        raise ConfigError("--label", label, "its cluster does not run the hf_static engine")
    trace = build_workload(cfg, load_base_trace(cfg), rate, seed)
    result = simulate(trace, entries[label].name, entries[label].params, executors, seed=seed,
                      max_model_len=cluster.max_model_len, **overhead_kwargs(cluster))
    return breakdown(executors), result.summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--label", default="CCB-HF")
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if not args.rate > 0:  # NaN too
        parser.error(f"--rate={args.rate}: must be a number > 0 (req/s)")
    try:
        parts, summary = run_breakdown(args.config, args.label, args.rate, args.seed, args.set)
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.label} at {args.rate:g} req/s, seed {args.seed}: "
          f"{summary['request_throughput']:.2f} req/s, mean E2E {summary['mean_e2e_s']:.1f} s")
    for key, value in parts.items():
        print(f"  {key:28s} {value:.3f}" if isinstance(value, float) else f"  {key:28s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
