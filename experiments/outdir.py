"""The results directory: resolved, writable, run directories kept inside it, write errors named.

A sweep writes only under the directory the user asked for (`--out`, or results/<name>/): it is
resolved once, must be a directory it can write, and every run directory is a plain name inside
OUT/runs. A write that fails (a full disk, a read-only mount) becomes one ResultsWriteError naming
the file and the OS's reason, never a traceback; what finished before stays on disk.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sim.errors import ConfigError


class ResultsWriteError(Exception):
    """Writing a result file failed; names the path and the OS's reason (errno text)."""

    def __init__(self, path: Path | str, exc: OSError) -> None:
        self.path = str(path)  # the file or directory that could not be written
        self.errno = exc.errno  # the OSError's errno (None when the OS gave none)
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        super().__init__(f"cannot write {self.path}: {reason}")


@contextmanager
def writing(path: Path | str) -> Iterator[None]:
    """Turn an OSError raised while writing `path` (or a temporary file for it) into a
    ResultsWriteError naming `path`."""
    try:
        yield
    except OSError as exc:
        raise ResultsWriteError(path, exc) from exc


def prepare_out_dir(out_dir: Path | str, field: str = "--out") -> Path:
    """The resolved results directory, created and checked writable; ConfigError naming
    `field` and the path when it is a file, cannot be created or cannot be written."""
    path = Path(out_dir).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise ConfigError(field, str(path), "is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(field, str(path), f"cannot create: {_reason(exc)}") from None
    probe = path / f".write-test-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise ConfigError(field, str(path), f"not writable: {_reason(exc)}") from None
    return path


def check_dir_name(field: str, name: str) -> None:
    """ConfigError naming `field` unless `name` is a plain, visible directory name."""
    if (not isinstance(name, str) or not name or name.startswith(".") or os.sep in name
            or (os.altsep is not None and os.altsep in name)):
        raise ConfigError(field, name, "must be a plain directory name (no path separator, "
                                       "not starting with '.')")


def run_dir(out_dir: Path, name: str) -> Path:
    """OUT/runs/<name>; ConfigError unless it is a plain name whose directory stays inside
    OUT/runs (also through a symbolic link)."""
    check_dir_name("run directory", name)
    runs = (out_dir / "runs").resolve()
    path = runs / name
    if path.resolve().parent != runs:
        raise ConfigError("run directory", str(path.resolve()), f"is not inside {runs}")
    return path


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)
