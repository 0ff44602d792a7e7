"""Result files of a sweep, its console tables, and the `--list` catalogue."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import pandas as pd

from experiments.config.experiment import rate_text
from experiments.files.host_files import add_phases, host_timing_record, write_step_tables
from experiments.files.outdir import atomic_write, writing
from experiments.files.resume import file_sha256
from sim.engine.simulate import RunResult

RUN_TABLES = ("records", "steps", "instances", "events")  # RunResult frames -> <name>.parquet

# (column header, summary key, scale, format) of the console table: one unit, every latency in
# seconds; a column whose key no row has (goodput without --goodput) is left out
TABLE_UNIT_NOTE = "latencies in s, throughputs per s"
TABLE_COLUMNS: tuple[tuple[str, str, float, str], ...] = (
    ("req/s", "request_throughput", 1.0, ".3f"),
    ("delivered req/s", "delivered_rps", 1.0, ".3f"),  # over the measured window (sim/steady)
    ("goodput req/s", "request_goodput", 1.0, ".3f"),
    ("out tok/s", "output_throughput", 1.0, ".1f"),
    ("tot tok/s", "total_token_throughput", 1.0, ".1f"),
    ("E2E s", "mean_e2e_s", 1.0, ".2f"),
    ("p99 E2E s", "p99_e2e_s", 1.0, ".2f"),
    ("TTFT s", "mean_ttft_s", 1.0, ".3f"),
    ("p99 TTFT s", "p99_ttft_s", 1.0, ".3f"),
    ("TPOT s", "mean_tpot_s", 1.0, ".4f"),
    ("p99 ITL s", "p99_itl_s", 1.0, ".4f"),
    ("done", "completed", 1.0, ".0f"),
    ("rej", "rejected", 1.0, ".0f"),
    ("fail", "failed", 1.0, ".0f"),
    ("cancel", "cancelled", 1.0, ".0f"),
    ("cut", "num_length_capped", 1.0, ".0f"),
    ("OOM", "num_oom_events", 1.0, ".0f"),
    ("busy", "busy_fraction", 1.0, ".2f"),
    ("batch", "mean_batch_size", 1.0, ".1f"),
    ("steady", "steady", 1.0, ".2g"),  # fraction of the seeds' runs in steady state
)


def run_id(label: str, rate: float | None, seed: int) -> str:
    """The run's directory name: <label>__rate<r>__seed<s>."""
    return f"{label}__rate{rate_text(rate)}__seed{seed}"


def plain(value: Any) -> Any:
    """JSON-safe: NaN / inf -> None, numpy scalars -> Python, dataclasses -> dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def write_json(path: Path, data: Any) -> None:
    """Write `data` as JSON atomically (experiments.files.outdir.atomic_write: a reader never sees a
    half-written file, a link is never followed); an OSError becomes a ResultsWriteError naming
    `path`."""
    write_text(path, json.dumps(plain(data), indent=2) + "\n")


def add_written_phases(run_dir: Path, **seconds: float) -> None:
    """Add measured seconds to the `phases_s` of a run directory's host_timing.json, for what
    is written after it (bench.json, which reads config.json)."""
    path = run_dir / "host_timing.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    add_phases(record, **seconds)
    write_json(path, record)


def write_text(path: Path, text: str) -> None:
    """Write `text` (UTF-8) atomically; an OSError becomes a ResultsWriteError naming `path`."""
    with atomic_write(path) as handle:
        handle.write(text.encode("utf-8"))


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    """Write `frame` as CSV atomically; an OSError becomes a ResultsWriteError naming `path`."""
    with atomic_write(path) as handle:
        frame.to_csv(handle, index=False)


def table_rows(result: RunResult) -> dict[str, int]:
    """{'records.parquet': rows, ...}: what write_run writes, for checking it on resume."""
    return {f"{name}.parquet": result.num_rows(name) for name in RUN_TABLES}


def write_run(run_dir: Path, result: RunResult, config: Mapping[str, Any],
              measured: Mapping[str, Any] | None = None) -> None:
    """One run's records, steps, instances, events, summary and resolved config, each file
    atomically; config.json also records the SHA-256 of every other file ("digests"), which
    a resumed sweep checks (experiments/files/resume.py). What was measured on the wall clock (the
    policy's host time, and `measured`: e.g. wall_s) goes to host_timing.json and
    host_timing.parquet only (experiments/files/host_files.py): every other file is the same on
    every run of one config."""
    with writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for name in RUN_TABLES:
        if name == "steps":
            write_step_tables(run_dir, result)  # and host_timing.parquet
            continue
        target = run_dir / f"{name}.parquet"
        with atomic_write(target) as handle:
            if result.table_path(name) is not None:  # streamed: the file moved in, unread
                result.write_table(name, handle.name, lands_at=target)
            else:
                getattr(result, name).to_parquet(handle, index=False)
    add_phases(result.host_timing, write=time.perf_counter() - start)
    write_json(run_dir / "host_timing.json", host_timing_record(result, measured))
    write_json(run_dir / "summary.json", result.summary)
    written = [f"{name}.parquet" for name in RUN_TABLES] + ["summary.json"]
    with writing(run_dir):
        digests = {name: file_sha256(run_dir / name) for name in written}
    write_json(run_dir / "config.json", {**config, "digests": digests})


def summary_row(label: str, policy: str, rate: float | None, seed: int,
                summary: Mapping[str, float]) -> dict[str, Any]:
    """One row of summary.csv: the run's keys, then every summary metric."""
    return {"run": run_id(label, rate, seed), "label": label, "policy": policy,
            "rate": math.nan if rate is None else rate, "seed": seed, **summary}


def write_summaries(out_dir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rewrite OUT/summary.csv and OUT/summary.json with every run so far."""
    write_csv(out_dir / "summary.csv", pd.DataFrame(list(rows)))
    write_json(out_dir / "summary.json", list(rows))


def rebuild_summaries(out_dir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """OUT/summary.csv and summary.json rebuilt from `rows` (the runs found intact on disk),
    or removed when there are none: a summary never lists a run whose files are not there."""
    if rows:
        write_summaries(out_dir, rows)
        return
    for name in ("summary.csv", "summary.json"):
        with writing(out_dir / name):
            (out_dir / name).unlink(missing_ok=True)


def _cell(value: Any, scale: float, fmt: str) -> str:
    try:
        number = float(value) * scale
    except (TypeError, ValueError):
        return "-"
    return format(number, fmt) if math.isfinite(number) else "-"


def format_table(rows: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> str:
    """One line per (policy label, rate), metrics averaged over seeds, policies in order."""
    if not rows:
        return "(no runs)"
    frame = pd.DataFrame(list(rows))
    columns = [c for c in TABLE_COLUMNS if c[1] in frame.columns]
    lines = []
    for label, rate, values in seed_means(frame, [key for _, key, _, _ in columns], labels):
        cells = {head: _cell(values[key], scale, fmt) for head, key, scale, fmt in columns}
        rate_cell = "trace" if pd.isna(rate) else f"{rate:g}"
        lines.append({"policy": label, "rate": rate_cell, **cells})
    return f"({TABLE_UNIT_NOTE})\n" + pd.DataFrame(lines).to_string(index=False)


def seed_means(frame: pd.DataFrame, keys: Sequence[str],
               labels: Sequence[str]) -> Iterator[tuple[str, Any, pd.Series]]:
    """(policy label, rate, the `keys` averaged over seeds) for each label and rate, policies in
    `labels` order, rates in run order."""
    grouped = frame.groupby(["label", "rate"], dropna=False, sort=False)[list(keys)].mean()
    for label in labels:
        for (lab, rate), values in grouped.iterrows():
            if lab == label:
                yield label, rate, values


def run_line(row: Mapping[str, Any], wall_s: float) -> str:
    """A one-line digest of a finished run (with what was rejected, failed or cut, if any)."""
    line = (f"{row['run']}: {row['completed']}/{row['num_requests']} done, "
            f"{_cell(row['request_throughput'], 1, '.3f')} req/s, "
            f"E2E mean {_cell(row['mean_e2e_s'], 1, '.2f')} s, "
            f"p99 {_cell(row['p99_e2e_s'], 1, '.2f')} s ({wall_s:.1f} s wall)")
    problems = reason_text(row)
    return f"{line}; {problems}" if problems else line


def _count(row: Mapping[str, Any], key: str) -> int:
    value = row.get(key)
    try:
        return 0 if value is None or value != value else int(value)
    except (TypeError, ValueError):
        return 0


def reason_text(row: Mapping[str, Any]) -> str:
    """'12 rejected, 3 cut (prompt_too_long: 12, max_model_len: 3)' or '' for a clean run."""
    parts = [f"{_count(row, key)} {word}" for key, word in
             (("rejected", "rejected"), ("failed", "failed"), ("cancelled", "cancelled"),
              ("num_length_capped", "cut"))
             if _count(row, key)]
    if not parts:
        return ""
    codes = [f"{key[len('reason_'):]}: {_count(row, key)}" for key in row
             if key.startswith("reason_") and _count(row, key)]
    return ", ".join(parts) + (f" ({', '.join(codes)})" if codes else "")


def bad_fraction(row: Mapping[str, Any]) -> float:
    """The fraction of a run's requests that were rejected or failed."""
    total = _count(row, "num_requests")
    return (_count(row, "rejected") + _count(row, "failed")) / total if total else 0.0


def rejection_warnings(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One warning line per run that rejected, failed or cut requests (none when all ran),
    and one per run whose workload a cap cut short while generating it (`workload_note`)."""
    lines = []
    for row in rows:
        text = reason_text(row)
        if text:
            lines.append(f"warning: {row['run']}: {text} of {_count(row, 'num_requests')} "
                         f"requests (records.parquet: finish_reason, reason, reason_detail)")
        note = row.get("workload_note")
        if isinstance(note, str) and note:
            lines.append(f"warning: {row['run']}: {note}")
    return lines


def catalogue() -> str:
    """Registered policies (Config fields and defaults), models, GPUs and trace formats."""
    from policies.registry import FOLLOWS, get_policy, policy_names
    from policies.vllm_batch_defaults import gpu_defaults
    from sim.hardware.gpus import GPUS
    from sim.models.catalog import MODELS
    from traces.paths import SHARED_TRACES
    from traces.registry import TRACE_FORMATS
    from traces.synthetic import LENGTH_PRESETS

    lines = ["Policies:"]
    for name in policy_names():
        follows = FOLLOWS.get(name)
        lines.append(f"  {name}" + (f"  (follows: {follows})" if follows else ""))
        for f in dataclasses.fields(get_policy(name).Config):
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else "?")
            note = f.metadata.get("default_note")
            lines.append(f"      {f.name}: {f.type} = {default!r}" + (f"  ({note})" if note else ""))
    contexts = ", ".join(f"{name} ({m.max_position_embeddings})" for name, m in MODELS.items())
    lines += [f"Models (context, tokens): {contexts}", f"GPUs: {', '.join(GPUS)}",
              "vllm batch defaults by GPU (max_num_batched_tokens / max_num_seqs, as `vllm "
              "serve`): " + ", ".join(f"{name} {t} / {s}" for name, (t, s) in
                                      ((g.name, gpu_defaults(g.name, g.memory_bytes))
                                       for g in GPUS.values())),
              f"Trace formats: {', '.join(TRACE_FORMATS)}",
              f"Shared traces: {', '.join(SHARED_TRACES)}",
              f"Length presets: {', '.join(LENGTH_PRESETS)}"]
    return "\n".join(lines)
