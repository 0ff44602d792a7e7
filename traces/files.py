"""Opening trace files: existence checks, the `limit` argument, JSON-lines reading."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from sim.errors import ConfigError, TraceError


def existing_file(path: str | Path) -> Path:
    """`path` as a Path; FileNotFoundError naming it when it is not a file."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"trace file not found: {p}")
    return p


def check_limit(limit: int | None) -> None:
    """ConfigError unless limit is None or a positive int (a row count)."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError("trace.limit", limit, "must be a positive int (rows) or None")


def open_text(path: Path) -> IO[str]:
    """The file opened for text (BOM dropped, newlines kept for csv); `.gz` is decompressed."""
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return path.open("r", encoding="utf-8-sig", newline="")


def iter_jsonl(path: Path, limit: int | None = None) -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) for each non-blank line, at most `limit` of them."""
    count = 0
    with open_text(path) as fh:
        for lineno, line in enumerate(fh, start=1):
            if limit is not None and count >= limit:
                return
            if not line.strip():
                continue
            yield lineno, parse_json_object(line, str(path), lineno)
            count += 1


def parse_json_object(line: str, source: str, lineno: int) -> dict:
    """One JSON object; TraceError with the line number when malformed or not an object."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        snippet = line.strip()[:80]
        raise TraceError(source, f"malformed JSON on line {lineno}: {exc}",
                         row=lineno, value=snippet) from None
    if not isinstance(obj, dict):
        raise TraceError(source, f"line {lineno} is not a JSON object", row=lineno,
                         value=line.strip()[:80])
    return obj


def peek_jsonl(path: Path) -> dict | None:
    """The first JSON object of a JSON-lines file, or None when it has none."""
    for _, obj in iter_jsonl(path, limit=1):
        return obj
    return None
