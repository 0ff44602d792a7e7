"""Opening trace files: existence checks, the `limit` argument, text decoding, JSON-lines reading.

Every text format is read through `open_text`, which looks at the bytes rather than the name:
gzip (magic bytes 1f 8b) is decompressed whatever the suffix; a UTF-8 / UTF-16 / UTF-32 byte order
mark picks that encoding (else UTF-8); a file with NUL bytes in its first block and no BOM is
binary. A binary file, bytes that are not valid text, or a corrupt gzip stream raise `TraceError`
naming the file and the format being read, never a UnicodeDecodeError traceback.
"""

from __future__ import annotations

import codecs
import gzip
import io
import json
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, BinaryIO

import pandas as pd

from sim.util.errors import ConfigError, TraceError
from traces.columns import BadCells

GZIP_MAGIC = b"\x1f\x8b"  # first two bytes of every gzip stream
SNIFF_BYTES = 8192  # bytes of (decompressed) content inspected for a BOM and NUL bytes
_BOMS: tuple[tuple[bytes, str], ...] = (  # longest first: the UTF-32 LE BOM starts like UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"))


class ExactFloat(float):
    """A JSON number with a fraction or exponent: a float that keeps its decimal text, so
    arrival times can be shifted to start at 0 before any rounding (`traces.times`)."""

    __slots__ = ("text",)

    def __new__(cls, text: str) -> "ExactFloat":
        obj = super().__new__(cls, text)
        obj.text = text  # the number as written in the file
        return obj

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return ExactFloat, (self.text,)


def existing_file(path: str | Path) -> Path:
    """`path` (`~` expanded) as a Path to a regular file, checked before anything opens it:
    FileNotFoundError naming it when nothing is there, TraceError when it is not a regular file
    (a FIFO or a link to /dev/zero would block or never end a read or a hash)."""
    p = Path(path).expanduser()
    try:
        mode = p.stat().st_mode  # follows links; never opens the file
    except FileNotFoundError:
        raise FileNotFoundError(f"trace file not found: {p}") from None
    except OSError as exc:
        raise TraceError(str(p), f"cannot read the trace file: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
                if stat.S_ISSOCK(mode) else "a special file")
        raise TraceError(str(p), f"not a regular file ({kind}); a trace must be a file on disk "
                                 f"(it is hashed and read whole)")
    return p


def check_limit(limit: int | None) -> None:
    """ConfigError unless limit is None or a positive int (a row count)."""
    if limit is None:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError("trace.limit", limit, "must be a positive int (rows) or None")


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name)."""
    with path.open("rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_binary(path: Path) -> BinaryIO:
    """The file's bytes, decompressed when it is gzip (by magic bytes, not by suffix)."""
    if is_gzip(path):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return path.open("rb")


def sniff_encoding(head: bytes, source: str, fmt: str) -> str:
    """The text encoding of a file starting with `head`; TraceError for a binary file."""
    for bom, encoding in _BOMS:
        if head.startswith(bom):
            return encoding
    if b"\x00" in head:
        raise TraceError(source, f"binary file (NUL bytes, no text byte order mark); format "
                                 f"tried: {fmt}, which needs UTF-8 or UTF-16 text (gzip allowed)",
                         value=head[:16])
    return "utf-8"


@contextmanager
def open_text(path: Path, fmt: str = "text") -> Iterator[IO[str]]:
    """The file as text (gzip decompressed, BOM dropped, newlines kept for csv). Decoding and
    decompression errors raised while the block reads it become TraceError naming `fmt`."""
    source = str(path)
    raw = open_binary(path)
    try:
        with _read_errors(source, fmt):
            head = raw.read(SNIFF_BYTES)
            encoding = sniff_encoding(head, source, fmt)
            raw.seek(0)
            with io.TextIOWrapper(raw, encoding=encoding, newline="") as fh:
                yield fh
    finally:
        raw.close()


@contextmanager
def _read_errors(source: str, fmt: str) -> Iterator[None]:
    """Turn undecodable text and corrupt gzip streams into TraceError."""
    try:
        yield
    except UnicodeError as exc:
        raise TraceError(source, f"not valid text ({exc}); format tried: {fmt}, which needs "
                                 f"UTF-8, or UTF-16 / UTF-32 with a byte order mark") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise TraceError(source, f"corrupt gzip data ({exc}); format tried: {fmt}") from None


def iter_jsonl(path: Path, limit: int | None = None, *, fmt: str = "jsonl",
               bad: list[TraceError] | None = None) -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) for each non-blank line, at most `limit` of them.
    Numbers with a fraction or exponent are ExactFloat (floats keeping their text). With `bad`,
    a line that is not a JSON object is appended to it (and counts toward `limit`) instead of
    raised."""
    count = 0
    with open_text(path, fmt) as fh:
        for lineno, line in enumerate(fh, start=1):
            if limit is not None and count >= limit:
                return
            if not line.strip():
                continue
            count += 1
            try:
                obj = parse_json_object(line, str(path), lineno)
            except TraceError as err:
                if bad is None:
                    raise
                bad.append(err)
                continue
            yield lineno, obj


def parse_json_object(line: str, source: str, lineno: int) -> dict:
    """One JSON object; a TraceError (BadCells, for loaders that skip bad rows) with the line
    number when malformed or not an object."""
    try:
        obj = json.loads(line, parse_float=ExactFloat)
    except ValueError as exc:
        snippet = line.strip()[:80]
        raise BadCells(source, f"malformed JSON on line {lineno}: {exc}",
                       why=f"malformed JSON ({getattr(exc, 'msg', exc)})", field=None,
                       rows=[lineno], cells=[snippet]) from None
    if not isinstance(obj, dict):
        raise BadCells(source, f"line {lineno} is not a JSON object", why="not a JSON object",
                       field=None, rows=[lineno], cells=[line.strip()[:80]])
    return obj


def peek_jsonl(path: Path, fmt: str = "jsonl") -> dict | None:
    """The first JSON object of a JSON-lines file, or None when it has none."""
    for _, obj in iter_jsonl(path, limit=1, fmt=fmt):
        return obj
    return None


def read_csv_cells(path: Path, limit: int | None, dtype: object) -> pd.DataFrame:
    """A CSV trace's first `limit` rows (header names stripped); TraceError for an empty or
    malformed file. Encoding and gzip are found from the bytes (`open_text`)."""
    with open_text(path, "csv") as fh:
        try:
            raw = pd.read_csv(fh, nrows=limit, dtype=dtype)
        except pd.errors.EmptyDataError:
            raise TraceError(str(path), "empty file; expected a header row") from None
        except pd.errors.ParserError as exc:
            raise TraceError(str(path), f"malformed CSV: {exc}") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    return raw
