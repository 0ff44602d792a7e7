"""The request trace of each run: a synthetic draw (or vLLM's random dataset, RTP-LLM's
plugin-call or P-tuning pattern), multi-turn sessions, a multi-client mix, or a trace file (read
through its column mapping, if any; with `skip_bad_rows`, its malformed rows dropped and
reported) re-timed at a rate; a rate of inf puts every request at 0."""

from __future__ import annotations

import math
import sys

import pandas as pd

from experiments.config.classes import apply_classes
from experiments.config.experiment import ExperimentConfig, PolicyEntry
from experiments.config.workload import TraceWorkload, clients_at_rate, sessions_at_rate
from experiments.config.workload_checks import check_workload
from experiments.config.workload_rtp import rtp_at_rate
from sim.util.errors import ConfigError, TraceError
from traces.bench_arrivals import vllm_retime
from traces.clients import multi_client_trace
from traces.files import existing_file
from traces.mapping import load_mapped
from traces.plugin_calls import plugin_call_trace
from traces.ptuning import ptuning_trace
from traces.random_dataset import random_trace
from traces.registry import infer_format, load_trace, shared_trace_path
from traces.schema import trace_stats
from traces.session_keys import sessions_from_blocks
from traces.sessions import session_draw
from traces.skip_rows import load_skipping
from traces.synthetic import poisson_from_lengths, scale_rate, synthetic_trace
from traces.transform import all_at_once, gamma_from_lengths


WORKLOAD_NOTE = "workload_note"  # summary key (and trace attrs key): what capped the workload


def load_base_trace(cfg: ExperimentConfig) -> pd.DataFrame | None:
    """The trace file's requests (loaded once per sweep, before any run, so a trace the config
    cannot replay fails here); None for a synthetic workload. The config checks only the
    workload can answer (experiments/config/workload_checks.py) run here too, trace or not."""
    trace = cfg.workload.trace
    if trace is None:
        check_workload(cfg, None, "the generated workload")
        return None
    path = trace_path(trace)
    mapped = trace.mapping()
    note = None
    if trace.skip_bad_rows:
        df, note = load_skipping_bad_rows(path, trace)
    elif mapped is None:
        df = load_trace(path, trace.format, limit=trace.limit)
    else:
        fmt = trace.format if trace.format is not None else infer_format(path)
        df = load_mapped(path, "csv" if fmt == "azure" else fmt, mapped, limit=trace.limit)
    if len(df) == 0:
        raise TraceError(path, "trace has no requests")
    if trace.session_blocks is not None:
        df = sessions_from_blocks(df, trace.session_blocks, path)
    check_retime(df, trace, path)
    check_workload(cfg, df, path)
    if note is not None:  # every run of the trace records it (build_workload)
        df.attrs[WORKLOAD_NOTE] = note
    return df


def load_skipping_bad_rows(path: str, trace: TraceWorkload) -> tuple[pd.DataFrame, str | None]:
    """The trace without its malformed rows (traces/skip_rows.py), and a note saying what was
    dropped (None when nothing was); prints the count, by reason, and the first bad rows."""
    fmt = trace.format if trace.format is not None else infer_format(path)
    df, skipped = load_skipping(path, fmt, trace.mapping(), limit=trace.limit)
    for line in skipped.report():
        print(line, file=sys.stderr)
    return df, skipped.note()


def check_retime(df: pd.DataFrame, trace: TraceWorkload, source: str) -> None:
    """ConfigError when the trace's retiming divides by a span the trace does not have:
    `scale` rescales the trace's mean rate (requests / span), undefined when every request
    arrives at one instant."""
    if trace.retime != "scale":
        return
    stats = trace_stats(df)
    if not 0 < stats["rate_per_s"] < math.inf:
        first = float(df["arrival_s"].iloc[0])
        raise ConfigError("workload.trace.retime", trace.retime,
                          f"trace {source} has {len(df)} request(s), all arriving at "
                          f"{first:g} s (span {stats['duration_s']:g} s): its rate is "
                          f"undefined, so it cannot be rescaled to request_rates; use retime: "
                          f"poisson (fresh arrivals at each rate) or none")


def trace_path(trace: TraceWorkload) -> str:
    """Where the trace is read from (`~` expanded), the one path that is hashed and read:
    FileNotFoundError when nothing is there, TraceError unless it is a regular file (a FIFO
    or a link to /dev/zero would hang the hash), checked before anything opens it."""
    if trace.name is not None:
        return str(shared_trace_path(trace.name))
    assert trace.path is not None  # a TraceWorkload has exactly one of name / path
    return str(existing_file(trace.path))


def build_workload(cfg: ExperimentConfig, base: pd.DataFrame | None, rate: float | None,
                   seed: int, entry: PolicyEntry | None = None) -> pd.DataFrame:
    """The requests of one run at `rate` req/s (None: the trace as is), capped by the config,
    with the class settings of policy `entry` (the experiment's when None) applied; a cap
    that bound while generating it (sessions), or the rows `skip_bad_rows` dropped from the
    trace file, is in its attrs[WORKLOAD_NOTE]."""
    note: str | None = None
    if cfg.workload.synthetic is not None:
        assert rate is not None
        df = synthetic_trace(cfg.workload.synthetic.at_rate(rate), seed)
    elif cfg.workload.random is not None:
        assert rate is not None
        df = random_trace(cfg.workload.random, rate, seed)
    elif cfg.workload.sessions is not None:
        assert rate is not None
        drawn = session_draw(sessions_at_rate(cfg.workload.sessions, rate, "rate"), seed)
        df, note = drawn.trace, drawn.note
    elif cfg.workload.clients is not None:
        assert rate is not None
        df = multi_client_trace(clients_at_rate(cfg.workload.clients, rate, "rate"), seed)
    elif cfg.workload.plugin_calls is not None:
        assert rate is not None
        df = plugin_call_trace(rtp_at_rate(cfg.workload.plugin_calls, rate, "rate"), seed)
    elif cfg.workload.ptuning is not None:
        assert rate is not None
        df = ptuning_trace(rtp_at_rate(cfg.workload.ptuning, rate, "rate"), seed)
    else:
        assert base is not None and cfg.workload.trace is not None
        df = retime(base, cfg.workload.trace, rate, seed)
        note = base.attrs.get(WORKLOAD_NOTE)  # rows skip_bad_rows dropped from the file
    out = apply_classes(cap(df, cfg.max_requests, cfg.duration_s), cfg.classes_for(entry))
    if note is not None:  # a cap that bound while generating: the run's summary shows it
        out.attrs[WORKLOAD_NOTE] = note
    return out


def retime(base: pd.DataFrame, trace: TraceWorkload, rate: float | None,
           seed: int) -> pd.DataFrame:
    """`base` replayed as is, sped up by rate_scale, or re-timed to `rate` req/s (inf: every
    request at 0, in trace order)."""
    if trace.retime != "none" and rate == math.inf:
        return all_at_once(base)
    if trace.retime == "gamma":
        assert rate is not None
        return gamma_from_lengths(base, rate, seed, burstiness=trace.burstiness)
    if trace.retime == "vllm":
        assert rate is not None
        return vllm_retime(base, rate, seed, trace.burstiness)
    if trace.retime == "poisson":
        assert rate is not None
        return poisson_from_lengths(base, rate, seed)
    if trace.retime == "scale":
        return scale_rate(base, target_rate_per_s=rate)
    return scale_rate(base, trace.rate_scale) if trace.rate_scale != 1 else base.copy()


def cap(df: pd.DataFrame, max_requests: int | None, duration_s: float | None) -> pd.DataFrame:
    """The first `max_requests` arrivals within `duration_s` of the first arrival."""
    if duration_s is not None and len(df):
        start = float(df["arrival_s"].iloc[0])
        df = df[df["arrival_s"] < start + duration_s]
    if max_requests is not None:
        df = df.head(max_requests)
    return df.reset_index(drop=True)
