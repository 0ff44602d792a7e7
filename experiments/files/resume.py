"""Honest resume: a finished run is reused only when its identity matches and its files open.

A run's identity (experiments/sweep/runner.py run_identity) covers the trace file's content (size and a
blake2b digest, computed once per file version per process), the result schema version and the
simulator's version: the installed package version plus a digest of the simulation code
(`sim/`, `policies/`, `traces/`), so a trace edited in place, an upgraded simulator, a local code
change or new result columns all rerun. Before a run is skipped its files are checked:
config.json and summary.json parse as JSON objects with the expected keys, each parquet table
opens (footer only) with the row count written beside it, and every file the run wrote (its four
tables and summary.json) still has the SHA-256 digest recorded in its config.json when it was
written, so an edited, truncated or swapped file (another run's records.parquet, say) is rerun.
Anything off gives one line saying why the run is not reused.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path
from typing import Any, Mapping

import pyarrow.parquet as pq

from sim.models.catalog import model_config_file
from sim.util.errors import TraceError

RESULT_SCHEMA_VERSION = 5  # bump whenever records / steps / summary columns change (4: the
# measured policy_host_s moved to host_timing.json / .parquet; 5: the cost and energy keys)
SUMMARY_KEYS = ("num_requests", "completed", "request_throughput")  # a summary.json must have


CODE_PACKAGES = ("sim", "policies", "traces")  # the code a run's results depend on


def simulator_version() -> str:
    """servesim's installed version (or "dev") and a digest of the simulation code, e.g.
    "0.1.0+src.3f2a...": a run from edited code is not reused."""
    try:
        version = importlib.metadata.version("servesim")
    except importlib.metadata.PackageNotFoundError:
        version = "dev"
    return f"{version}+src.{code_digest()}"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """blake2b of every .py file of CODE_PACKAGES (path and bytes, in path order), once per
    process."""
    root = Path(__file__).resolve().parents[1]
    hasher = hashlib.blake2b(digest_size=8)
    for package in CODE_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            hasher.update(str(path.relative_to(root)).encode())
            hasher.update(path.read_bytes())
    return hasher.hexdigest()


def file_digest(path: str | Path) -> str:
    """'<size>:<blake2b hex>' of the file's bytes; hashed once per (path, size, mtime_ns)."""
    try:
        stat = os.stat(path)
        return _digest(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    except OSError as exc:
        raise TraceError(str(path), f"cannot read the trace file: "
                                    f"{exc.strerror or exc}") from None


@functools.lru_cache(maxsize=64)
def _digest(path: str, size: int, mtime_ns: int) -> str:  # the key's stat fields pin a version
    hasher = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return f"{size}:{hasher.hexdigest()}"


def referenced_files(cluster: Mapping[str, Any]) -> dict[str, str]:
    """Digests of the files a cluster reads besides the trace (a model's config.json given by
    path, a draft model's, cost-model and scheduling-overhead calibrations), keyed by field, so
    a file edited in place makes its runs stale. Built-in names are not files: skipped."""
    found: dict[str, str] = {}
    cost = cluster.get("cost_model") or {}
    candidates = {"model": cluster.get("model"), "draft_model": cluster.get("draft_model"),
                  "gpu": cluster.get("gpu"), "cost_model.calibration": cost.get("calibration"),
                  "cost_model.params": cost.get("params"),
                  "scheduling_overhead.calibration":
                      (cluster.get("scheduling_overhead") or {}).get("calibration")}
    for field, value in candidates.items():
        if not isinstance(value, str):
            continue
        path = model_config_file(value) if field.endswith("model") else Path(value)
        if path is None:  # a built-in model: no file
            continue
        if path.is_dir():
            path = path / "config.json"
        if path.is_file():
            found[field] = file_digest(path)
    profiles = cost.get("profiles")
    if isinstance(profiles, str) and Path(profiles).exists():  # a folder of tables, or one file
        root = Path(profiles)
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in files:
            if path.is_file() and path.suffix in (".csv", ".json"):
                found[f"cost_model.profiles/{path.relative_to(root) if root.is_dir() else ''}"] = \
                    file_digest(path)
    return found


class NotReusable(Exception):
    """A run directory on disk that must be rerun; the message says why (one line)."""


def file_sha256(path: Path) -> str:
    """The SHA-256 hex digest of the file's bytes."""
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def reusable_summary(run_dir: Path, run_hash: str, identity: Mapping[str, Any]) -> dict:
    """The summary of the finished run in `run_dir`; NotReusable('stale: ...' / 'corrupt: ...')
    when its hash differs or a file is missing, unreadable, inconsistent or not the one
    written."""
    config = _json_object(run_dir / "config.json")
    run = config.get("run")
    if not isinstance(run, dict):
        raise NotReusable("corrupt: config.json has no run section")
    if run.get("hash") != run_hash:
        raise NotReusable(stale_reason(run.get("identity"), identity))
    summary = _json_object(run_dir / "summary.json")
    missing = [key for key in SUMMARY_KEYS if key not in summary]
    if missing:
        raise NotReusable(f"corrupt: summary.json lacks {', '.join(missing)}")
    files = run.get("files")
    if not isinstance(files, dict) or "records.parquet" not in files:
        raise NotReusable("corrupt: config.json has no row counts of the run's files")
    if files["records.parquet"] != summary["num_requests"]:
        raise NotReusable(f"corrupt: records.parquet should hold {files['records.parquet']} "
                          f"rows but summary.json counts {summary['num_requests']} requests")
    for name, rows in files.items():
        _check_parquet(run_dir, name, rows)
    check_digests(run_dir, config.get("digests"), ["summary.json", *files])
    return summary


def check_digests(run_dir: Path, digests: Any, names: list[str]) -> None:
    """NotReusable unless each of `names` in `run_dir` has the SHA-256 in `digests` (config.json's
    "digests", recorded when the run was written)."""
    if not isinstance(digests, dict) or any(not isinstance(digests.get(n), str) for n in names):
        raise NotReusable("stale: written by an older servesim (no content digests of its files)")
    for name in names:
        try:
            found = file_sha256(run_dir / name)
        except OSError as exc:
            raise NotReusable(f"corrupt: {name} unreadable ({exc.strerror or exc})") from None
        if found != digests[name]:
            raise NotReusable(f"corrupt: {name} is not the file this run wrote (edited, "
                              f"truncated or swapped: SHA-256 {found[:12]}..., written "
                              f"{digests[name][:12]}...)")


def stale_reason(stored: Any, identity: Mapping[str, Any]) -> str:
    """'stale: trace changed' and the like: what differs between two run identities."""
    if not isinstance(stored, dict) or "result_schema" not in stored:
        return "stale: written by an older servesim (no result schema version)"
    for key, what in (("result_schema", "result schema"),
                      ("simulator", "servesim version or simulation code")):
        if stored.get(key) != identity.get(key):
            return f"stale: {what} {stored.get(key)} -> {identity.get(key)}"
    if _trace_content(stored) != _trace_content(identity):
        return "stale: trace changed"
    changed = sorted(k for k in set(stored) | set(identity) if stored.get(k) != identity.get(k))
    return f"stale: config changed ({', '.join(changed) or 'hash'})"


def _trace_content(identity: Mapping[str, Any]) -> Any:
    trace = (identity.get("workload") or {}).get("trace")
    return trace.get("content") if isinstance(trace, dict) else None


def _json_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotReusable(f"corrupt: {path.name} missing") from None
    except (OSError, ValueError) as exc:
        raise NotReusable(f"corrupt: {path.name} unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise NotReusable(f"corrupt: {path.name} is not a JSON object")
    return data


def _check_parquet(run_dir: Path, name: str, rows: Any) -> None:
    path = run_dir / name
    if Path(name).name != name or not name.endswith(".parquet"):
        raise NotReusable(f"corrupt: config.json lists an unexpected file {name!r}")
    try:
        found = pq.read_metadata(path).num_rows  # the footer only, not the data
    except FileNotFoundError:
        raise NotReusable(f"corrupt: {name} missing") from None
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise NotReusable(f"corrupt: {name} unreadable ({type(exc).__name__})") from None
    if found != rows:
        raise NotReusable(f"corrupt: {name} has {found} rows, {rows} were written")
