"""A local process pool whose workers die with the sweep driver, and that signals shut down.

Workers watch their parent: on Linux the kernel sends them SIGTERM when the driver dies
(prctl PR_SET_PDEATHSIG), and everywhere a daemon thread exits the worker once its parent pid
changes, so killing only the driver (even with SIGKILL) never leaves workers simulating. Workers
ignore SIGINT (Ctrl-C reaches the whole process group): the driver handles it, and SIGTERM, by
cancelling every queued run and terminating the workers before it reports the interruption.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator, Sequence

PR_SET_PDEATHSIG = 1  # prctl option: signal this process when its parent dies (Linux)
PARENT_POLL_S = 1.0  # seconds between a worker's checks that its parent is alive
WAIT_S = 0.2  # seconds the driver waits for a run before looking for a caught signal


class Interrupted(KeyboardInterrupt):
    """The driver got SIGTERM (or SIGINT) while the pool ran; the pool has been shut down."""

    def __init__(self, signum: int) -> None:
        self.signum = signum  # the signal received
        super().__init__(f"interrupted by signal {signum}")


def completed(fn: Callable[..., Any], calls: Sequence[tuple], jobs: int) -> Iterator[Any]:
    """`fn(*args)` for every args of `calls` in `jobs` worker processes, in completion order.

    SIGINT and SIGTERM only set a flag that the loop reads between short waits: an exception
    raised from a signal handler could land inside concurrent.futures' own locks and leave the
    shutdown below waiting on a lock nobody releases."""
    ctx = multiprocessing.get_context(start_method())
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=watch_parent,
                               initargs=(os.getpid(),))
    received: list[int] = []  # signals caught while the pool runs
    previous = _on_signals(lambda signum, frame: received.append(signum))
    finished = False
    try:
        pending = {pool.submit(fn, *args) for args in calls}
        while pending:
            done, pending = wait(pending, timeout=WAIT_S, return_when=FIRST_COMPLETED)
            if received:
                raise Interrupted(received[0])
            for fut in done:
                yield fut.result()
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:
            shut_down(pool)
        _restore_signals(previous)


def shut_down(pool: ProcessPoolExecutor) -> None:
    """Cancel every queued call and terminate the workers (the runs in flight are lost)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public API in 3.11
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in workers:
        if proc.is_alive():
            proc.terminate()
    for proc in workers:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


def start_method() -> str:
    """"fork" (workers inherit the loaded trace) unless this process has loaded torch: its
    native thread pools may hold locks at the fork, and a forked worker then waits on them
    forever; "spawn" starts workers from a clean process instead (children of this process,
    as `watch_parent` expects: a forkserver's workers are the server's)."""
    if "fork" in multiprocessing.get_all_start_methods() and "torch" not in sys.modules:
        return "fork"
    return "spawn"


def watch_parent(parent: int) -> None:
    """Pool initializer: exit when `parent` (the driver) dies; leave Ctrl-C to the driver."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the driver's handler, inherited by fork
    _set_pdeathsig(signal.SIGTERM)
    if os.getppid() != parent:  # the driver died before the watch was armed
        os._exit(1)
    threading.Thread(target=_poll_parent, args=(parent,), name="parent-watch",
                     daemon=True).start()


def _set_pdeathsig(signum: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the polling thread still watches
        pass


def _poll_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def _on_signals(handler: Any) -> dict[int, Any]:
    """Install `handler` for SIGINT and SIGTERM; the previous handlers (none off the main
    thread, where signals cannot be caught)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
