"""How many requests a capacity probe holds: the rule that makes it long enough to settle.

A probe at `rate` req/s holds the configured workload's requests (the trace's `limit`, the
synthetic `num_requests`, ...) or, when more are needed, the most of

- `rate x min_window_s`: at least `min_window_s` seconds of arrivals, and
- `kv_multiple x the cluster's KV capacity (tokens, all instances) / the mean tokens (prompt +
  output) of the configured requests`: the probe offers several times what the KV caches hold,
  so an overload cannot hide in them (a burst a large cache absorbs looks served).

A probe that meets the SLO but is not steady (sim/metrics/steady.py: its queue was still filling when
the arrivals stopped) is run again with twice the requests, up to `max_doublings` times
(experiments/capacity/probe.py); one that is still not steady then fails.

A trace re-timed at the rate (`retime: poisson`, `gamma` or `vllm`) is lengthened by repeating
its requests in order (the length distribution unchanged), a synthetic workload, vLLM's random
dataset or a multi-client mix by drawing more. A trace with prefix blocks or sessions (a repeat
would hit the cache it filled), one re-timed by `scale`, sessions and RTP-LLM's plugin-call and
P-tuning workloads are probed as configured;
the steady-state check (sim/metrics/steady.py) still flags a probe too short to settle.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd

from experiments.config.classes import apply_classes
from experiments.config.experiment import ExperimentConfig, PolicyEntry
from experiments.config.workload import clients_at_rate
from experiments.sweep.workload import build_workload, cap, retime
from sim.util.errors import ConfigError
from traces.clients import multi_client_trace
from traces.random_dataset import random_trace
from traces.synthetic import synthetic_trace

NO_REPEAT_COLUMNS = ("block_ids", "session_id")  # trace columns a repeat would make share state
REPEATABLE = ("poisson", "gamma", "vllm")  # trace retimings that draw fresh arrivals at a rate


@dataclass(frozen=True)
class ProbeRule:
    """The least a probe offers (module docstring); 0 turns a term off."""

    min_window_s: float = 300.0  # seconds of arrivals a probe spans at least
    kv_multiple: float = 4.0  # a probe offers >= this many times the cluster's KV tokens
    max_doublings: int = 3  # times an unsteady probe meeting the SLO reruns twice as long

    def __post_init__(self) -> None:
        for name in ("min_window_s", "kv_multiple"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not 0 <= value < math.inf:
                raise ConfigError(name, value, "must be a finite number >= 0 (0: off)")
        value = self.max_doublings
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10:
            raise ConfigError("max_doublings", value, "must be an int in [0, 10]")

    def describe(self) -> str:
        """The rule in one line, as printed and written beside the results."""
        return (f"probe length: the configured requests, or more when needed to span "
                f">= {self.min_window_s:g} s of arrivals and offer >= {self.kv_multiple:g}x the "
                f"cluster's KV capacity in tokens (traces repeated in order); a probe meeting "
                f"the SLO but not steady reruns with twice the requests, up to "
                f"{self.max_doublings} times")

    def requests(self, rate: float, kv_tokens: int, mean_tokens: float) -> int:
        """Requests a probe at `rate` req/s needs by this rule."""
        by_time = math.ceil(rate * self.min_window_s)
        by_kv = math.ceil(self.kv_multiple * kv_tokens / mean_tokens) if mean_tokens > 0 else 0
        return max(by_time, by_kv)


def probe_workload(cfg: ExperimentConfig, base: pd.DataFrame | None, rate: float, seed: int,
                   entry: PolicyEntry, rule: ProbeRule, kv_tokens: int,
                   doublings: int = 0) -> tuple[pd.DataFrame, str]:
    """The probe's requests (`doublings` times twice as many as the rule's) and a note on
    its length ('' when as configured)."""
    df = build_workload(cfg, base, rate, seed, entry)
    if not len(df):
        return df, ""
    mean_tokens = float((df["prompt_tokens"] + df["output_tokens"]).mean())
    need = max(len(df), rule.requests(rate, kv_tokens, mean_tokens)) * 2 ** doublings
    if len(df) >= need:
        return df, ""
    longer = lengthen(cfg, base, rate, seed, entry, need)
    if longer is None:
        return df, (f"{len(df)} requests, not lengthened to the {need} the probe rule asks "
                    f"({what_is_kept(cfg)} is probed as configured)")
    return longer, f"lengthened from {len(df)} to {len(longer)} requests by the probe rule"


def lengthen(cfg: ExperimentConfig, base: pd.DataFrame | None, rate: float, seed: int,
             entry: PolicyEntry, need: int) -> pd.DataFrame | None:
    """`need` requests of the workload at `rate`; None when it cannot be lengthened."""
    workload = cfg.workload
    if workload.synthetic is not None:
        more = dataclasses.replace(workload.synthetic, num_requests=need, duration_s=None)
        df = synthetic_trace(more.at_rate(rate), seed)
    elif workload.random is not None:
        df = random_trace(dataclasses.replace(workload.random, num_requests=need), rate, seed)
    elif workload.clients is not None:
        more = dataclasses.replace(workload.clients, num_requests=need, duration_s=None)
        df = multi_client_trace(clients_at_rate(more, rate, "rate"), seed)
    elif workload.trace is not None and base is not None and \
            workload.trace.retime in REPEATABLE and \
            not any(c in base.columns for c in NO_REPEAT_COLUMNS):
        repeats = math.ceil(need / len(base))
        tiled = pd.concat([base] * repeats, ignore_index=True).head(need)
        df = retime(tiled, workload.trace, rate, seed)
    else:
        return None
    return apply_classes(cap(df, need, None), cfg.classes_for(entry))


def what_is_kept(cfg: ExperimentConfig) -> str:
    """Which kind of workload is not lengthened."""
    workload = cfg.workload
    if workload.sessions is not None:
        return "a session workload"
    if workload.plugin_calls is not None or workload.ptuning is not None:
        return "a plugin-call or P-tuning workload"
    if workload.trace is not None and workload.trace.retime not in REPEATABLE:
        return f"a trace re-timed by {workload.trace.retime}"
    return "a trace with prefix blocks or sessions"
