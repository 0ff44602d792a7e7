"""Trace formats by name, format inference, and the one entry point `load_trace`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from sim.util.errors import ConfigError
from traces.azure import AZURE_COLUMNS, load_azure
from traces.bench_trace import load_bench_trace, looks_like_bench
from traces.files import existing_file, open_text, peek_jsonl
from traces.generic import load_csv, load_jsonl, load_parquet
from traces.magnus_workload import load_magnus_trace
from traces.mooncake import load_mooncake
from traces.paths import default_data_dir, shared_trace_path

__all__ = ["TRACE_FORMATS", "TraceLoader", "default_data_dir", "infer_format", "load_trace",
           "shared_trace_path"]

TraceLoader = Callable[..., pd.DataFrame]  # (path, *, limit=None) -> trace DataFrame

TRACE_FORMATS: dict[str, TraceLoader] = {
    "azure": load_azure,
    "mooncake": load_mooncake,
    "csv": load_csv,
    "parquet": load_parquet,
    "jsonl": load_jsonl,
    "magnus_apps": load_magnus_trace,
    "vllm_bench": load_bench_trace,  # vllm bench serve --save-detailed (or SGLang's) result
}

_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
_PARQUET_SUFFIXES = (".parquet", ".pq")


def load_trace(path: str | Path, format: str | None = None, *,
               limit: int | None = None) -> pd.DataFrame:
    """The trace at `path` in the schema; `format` is inferred from the file when None."""
    if format is not None and format not in TRACE_FORMATS:
        raise ConfigError("trace.format", format, f"unknown; known: {', '.join(TRACE_FORMATS)}")
    path = existing_file(path)
    fmt = format if format is not None else infer_format(path)
    return TRACE_FORMATS[fmt](path, limit=limit)


def infer_format(path: str | Path) -> str:
    """Format name from the file name, then (for CSV / JSON lines) from its first record."""
    path = Path(path)
    name = path.name.lower().removesuffix(".gz")
    suffix = Path(name).suffix
    if suffix in _PARQUET_SUFFIXES:
        return "parquet"
    if suffix == ".csv":
        return "azure" if name.startswith("azure") or _has_azure_header(path) else "csv"
    if suffix in _JSONL_SUFFIXES:
        if name.startswith("mooncake"):
            return "mooncake"
        if path.is_file() and looks_like_bench(path):  # a serving benchmark's result
            return "vllm_bench"
        first = peek_jsonl(path, "jsonl (inferring mooncake / jsonl)") if path.is_file() else None
        return "mooncake" if first is not None and "hash_ids" in first else "jsonl"
    raise ConfigError("trace.format", suffix or path.name,
                      f"cannot infer the format of {path}; pass one of: "
                      f"{', '.join(TRACE_FORMATS)}")


def _has_azure_header(path: Path) -> bool:
    """True when the CSV header holds the Azure trace's columns."""
    if not path.is_file():
        return False
    with open_text(path, "csv (inferring azure / csv)") as fh:
        header = {c.strip() for c in fh.readline().split(",")}
    return set(AZURE_COLUMNS) <= header
