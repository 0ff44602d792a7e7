"""The results directory: resolved, writable, written atomically, never through a planted link.

A sweep writes only under the directory the user asked for (`--out`, or results/<name>/): it is
resolved once, must be a directory it can write, and every run directory is a plain name inside
OUT/runs, itself a real directory (a symbolic link there is refused by name, not followed).

Every result file is written by `atomic_write`: a temporary file with a unique name, created
exclusively (O_CREAT | O_EXCL | O_NOFOLLOW) in the target's own folder, written, fsynced and
renamed onto the target, whose folder is then fsynced. A target that is a symbolic link is
refused by name. So a reader, a crash or a second writer of the same file sees the old file or
the new one, never a mixture, and a link planted at a temporary or target name is never
followed. A run's directory is built the same way: a fresh, exclusively created hidden directory
(`temp_dir`) renamed into place (`replace_dir`).

A write that fails (a full disk, a read-only mount) becomes one ResultsWriteError naming the file
and the reason, never a traceback; what finished before stays on disk.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from sim.util.errors import ConfigError

TEMP_FILE = ".{}.{}.tmp"  # <target name>, <random hex>: a file being written (atomic_write)
TEMP_DIR = ".{}.tmp-{}"  # <name>, <random hex>: a run directory being built or replaced
SWEEP_FILES = ("config.json", "summary.csv", "summary.json", "failures.json", "table.txt")  # OUT/
_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
           | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))  # exclusive, no link


class ResultsWriteError(Exception):
    """Writing a result file failed; names the path and the reason (the OS's errno text)."""

    def __init__(self, path: Path | str, exc: OSError | str) -> None:
        self.path = str(path)  # the file or directory that could not be written
        self.errno = exc.errno if isinstance(exc, OSError) else None  # the OSError's errno
        if isinstance(exc, str):
            reason = exc
        else:
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


def refuse_link(path: Path) -> None:
    """ResultsWriteError naming `path` when it is a symbolic link (it is never written through)."""
    if path.is_symlink():
        raise ResultsWriteError(path, "is a symbolic link (refusing to write through it; "
                                      "remove the link)")


@contextmanager
def atomic_write(path: Path | str) -> Iterator[BinaryIO]:
    """Yield a binary file open on a new temporary file in `path`'s folder; when the block ends,
    fsync it and rename it onto `path`. The block may instead write the temporary file by its
    name (`handle.name`, e.g. a move onto it): what is at that name when the block ends is
    renamed. Any error removes the temporary file and leaves `path` as it was; an OSError
    becomes a ResultsWriteError naming `path`."""
    target = Path(path)
    with writing(target):
        refuse_link(target)
        tmp, fd = _create_temp(target)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.raw.name = str(tmp)  # type: ignore[attr-defined]  # not the fd number
                yield handle
            _fsync(tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            refuse_link(target)
            os.replace(tmp, target)
        except BaseException:
            _remove(tmp)
            raise
        _fsync_dir(target.parent)


def _create_temp(target: Path) -> tuple[Path, int]:
    """(path, fd) of a new empty file beside `target`, created exclusively under a random name."""
    for _ in range(100):
        tmp = target.with_name(TEMP_FILE.format(target.name, secrets.token_hex(8)))
        try:
            return tmp, os.open(tmp, _CREATE, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(target))


def _fsync(path: Path, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (where the OS can open a directory)."""
    try:
        _fsync(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EACCES, errno.EISDIR, errno.EBADF):
            raise


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def temp_dir(parent: Path, name: str) -> Path:
    """A new empty hidden directory `.<name>.tmp-<hex>` in `parent`, created exclusively (an
    existing entry of that name, a link included, is never reused)."""
    with writing(parent):
        for _ in range(100):
            path = parent / TEMP_DIR.format(name, secrets.token_hex(8))
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue
        raise FileExistsError(errno.EEXIST, "no free temporary directory name", str(parent))


def replace_dir(tmp: Path, final: Path) -> None:
    """Rename the directory `tmp` onto `final` (moving an existing `final` aside first and then
    deleting it); a `final` that is a symbolic link is refused by name."""
    with writing(final):
        refuse_link(final)
        old = None
        if final.exists():
            old = temp_dir(final.parent, final.name)
            os.replace(final, old)  # a directory onto an empty one: atomic
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


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
    probe = path / f".write-test-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        probe.touch(exist_ok=False)  # O_EXCL: never through a planted link
        probe.unlink()
    except OSError as exc:
        raise ConfigError(field, str(path), f"not writable: {_reason(exc)}") from None
    return path


def runs_dir(out_dir: Path) -> Path:
    """OUT/runs, created; ConfigError naming it when it is a symbolic link or not a directory
    (the sweep deletes and renames inside it, never through a link)."""
    runs = out_dir / "runs"
    if runs.is_symlink():
        raise ConfigError("--out", str(runs), "is a symbolic link: refusing to write or delete "
                                              "through it (make it a real directory)")
    if runs.exists() and not runs.is_dir():
        raise ConfigError("--out", str(runs), "is a file, not a directory")
    with writing(runs):
        runs.mkdir(exist_ok=True)
    return runs


def remove_stale(out_dir: Path) -> None:
    """Delete what an interrupted sweep left: temporary files of the sweep's files in OUT (not
    those of a capacity search writing there) and in each run directory, temporary run
    directories and streamed step, record and event files in OUT/runs. A link is removed
    itself, never followed.
    Call only while holding the folder's lock."""
    runs = runs_dir(out_dir)
    for name in SWEEP_FILES:
        _remove_matching(out_dir, TEMP_FILE.format(name, "*"))
    for entry in runs.iterdir():
        if entry.name.startswith("."):
            streamed = any(f".{table}-" in entry.name for table in ("steps", "records", "events"))
            if ".tmp-" in entry.name or (streamed and entry.name.endswith(".parquet")):
                _remove_entry(entry)
        elif entry.is_dir() and not entry.is_symlink():
            _remove_matching(entry, ".*.tmp")


def _remove_matching(folder: Path, pattern: str) -> None:
    for entry in folder.glob(pattern):
        _remove_entry(entry)


def _remove_entry(entry: Path) -> None:
    try:
        mode = entry.lstat().st_mode
        if stat.S_ISDIR(mode):
            shutil.rmtree(entry, ignore_errors=True)  # fd-based: never leaves the tree
        else:
            entry.unlink()  # a file, or a link itself
    except OSError:
        pass


def check_dir_name(field: str, name: str) -> None:
    """ConfigError naming `field` unless `name` is a plain, visible directory name."""
    if (not isinstance(name, str) or not name or name.startswith(".") or os.sep in name
            or (os.altsep is not None and os.altsep in name)):
        raise ConfigError(field, name, "must be a plain directory name (no path separator, "
                                       "not starting with '.')")


def run_dir(out_dir: Path, name: str) -> Path:
    """OUT/runs/<name>; ConfigError unless it is a plain name whose directory stays inside
    OUT/runs and neither it nor OUT/runs is a symbolic link."""
    check_dir_name("run directory", name)
    if (out_dir / "runs").is_symlink():
        runs_dir(out_dir)  # raises, naming it
    runs = (out_dir / "runs").resolve()
    path = runs / name
    if path.resolve().parent != runs:
        raise ConfigError("run directory", str(path.resolve()), f"is not inside {runs}")
    if path.is_symlink():
        raise ConfigError("run directory", str(path), "is a symbolic link: refusing to read, "
                                                      "replace or delete through it")
    return path


def _reason(exc: OSError) -> str:
    return os.strerror(exc.errno) if exc.errno else str(exc)
