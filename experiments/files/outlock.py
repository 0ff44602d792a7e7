"""One sweep at a time per results folder: an advisory lock on OUT/.sweep.lock.

A sweep holds an exclusive `flock` on OUT/.sweep.lock from before it cleans or reads OUT until
its last write, and records in the file who holds it (sweep name, config file, pid, host, start
time). A second sweep into the same folder, from this process or another, is refused with an
error naming the folder and that record. The operating system releases the lock when the
holding process ends, however it ends (SIGKILL, a crash, a power loss): a lock left by a killed
sweep never blocks the next one, and no lock file needs deleting. When the sweep ends the record
keeps only its name and config file (`settle`): pid, host and start time say who holds the folder,
not what it holds, so two sweeps of one config leave the same file (a killed sweep leaves them).
A folder holds one sweep's results: a sweep whose name differs from the
one in OUT/config.json is refused, naming the folder and the other sweep and its config file.

POSIX only (Linux, macOS: fcntl.flock). The lock is advisory and local: sweeps on different
machines writing one network folder are not kept apart on file systems without flock support.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Mapping

from sim.util.errors import ConfigError

LOCK_FILE = ".sweep.lock"  # in OUT: locked by the sweep writing there, holds its record
RECORD_BYTES = 1 << 16  # the most bytes of a lock record read back


@dataclass
class OutLock:
    """The held lock of one results folder."""

    path: Path  # OUT/.sweep.lock
    fd: int  # the open lock file; closing it (or the process ending) releases the lock
    previous: dict[str, Any] | None  # the record the file held when the lock was taken
    claimed: dict[str, Any] | None = None  # the record this sweep wrote (claim)

    def claim(self, name: str, source: str | Path | None) -> None:
        """Record the sweep `name` (its config file `source`) as OUT's, after checking that OUT
        holds no other sweep's results (check_owner)."""
        check_owner(self.path.parent, name, self.previous)
        self.claimed = {"name": name, "pid": os.getpid(), "host": socket.gethostname(),
                        "config": None if source is None else str(Path(source).resolve()),
                        "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        self.record(self.claimed)

    def settle(self) -> None:
        """The sweep is done: keep only its name and config file in the record (what
        check_owner's error names), dropping the pid, host and start time."""
        if self.claimed is not None:
            self.record({k: self.claimed[k] for k in ("name", "config")})

    def record(self, info: Mapping[str, Any]) -> None:
        """Write `info` (JSON) into the lock file, in place: the file is never replaced, as
        the lock belongs to its inode."""
        data = json.dumps(dict(info), sort_keys=True).encode("utf-8")
        os.ftruncate(self.fd, 0)
        os.lseek(self.fd, 0, os.SEEK_SET)
        os.write(self.fd, data)
        os.fsync(self.fd)


@contextmanager
def locked(out_dir: Path) -> Iterator[OutLock]:
    """Hold OUT's lock for the block; ConfigError naming the folder and the sweep holding it
    when another holds it, and naming the lock file when it is a link or cannot be opened."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        raise ConfigError("--out", str(out_dir), "cannot lock the results folder: this "
                                                 "platform has no fcntl.flock") from None
    path = out_dir / LOCK_FILE
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
                raise ConfigError("--out", str(path), f"cannot lock: {exc.strerror}") from None
            raise ConfigError("--out", str(out_dir), busy(read_record(fd))) from None
        yield OutLock(path, fd, read_record(fd))
    finally:
        os.close(fd)


def _open(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP or path.is_symlink():
            raise ConfigError("--out", str(path), "is a symbolic link: refusing to lock "
                                                  "through it (remove the link)") from None
        raise ConfigError("--out", str(path), f"cannot open the lock file: "
                                              f"{exc.strerror or exc}") from None


def check_owner(out_dir: Path, name: str, previous: Mapping[str, Any] | None) -> None:
    """ConfigError naming OUT and the other sweep when OUT/config.json is another sweep's (a
    different `name`): one folder holds one sweep's runs and summary, never a mixture."""
    try:
        owner = json.loads((out_dir / "config.json").read_text(encoding="utf-8")).get("name")
    except (OSError, ValueError, AttributeError):
        return  # a new folder, or one without a readable record: nothing to mix with
    if not isinstance(owner, str) or owner == name:
        return
    record = previous if previous and previous.get("name") == owner else {"name": owner}
    raise ConfigError("--out", str(out_dir), f"holds the results of {describe(record)}, not of "
                      f"sweep {name!r}: one folder holds one sweep; use another --out, or "
                      f"delete the folder to start over")


def read_record(fd: int) -> dict[str, Any] | None:
    """The JSON object in the lock file, or None when it is empty or not one."""
    try:
        data = json.loads(os.pread(fd, RECORD_BYTES, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe(record: Mapping[str, Any] | None) -> str:
    """"sweep 'a' (config /path/a.yaml)" for a lock record ("an unknown sweep" without one)."""
    if not record or not isinstance(record.get("name"), str):
        return "an unknown sweep"
    config = record.get("config")
    return f"sweep {record['name']!r} (config {config if config else 'not recorded'})"


def busy(record: Mapping[str, Any] | None) -> str:
    """Why the lock is not free: who holds it, and what to do."""
    text = f"in use by {describe(record)}"
    pid, host = (record or {}).get("pid"), (record or {}).get("host")
    if isinstance(pid, int):
        text += f", pid {pid} on {host}, started {(record or {}).get('started')}"
        if host == socket.gethostname() and not pid_alive(pid):
            text += (f"; pid {pid} has ended but a process it started still holds the lock: "
                     f"it ends within seconds, or end it yourself")
    return text + "; wait for it to finish, or use another --out"


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` exists on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
