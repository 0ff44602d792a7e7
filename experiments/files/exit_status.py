"""A command's exit status: the one tail of `experiments.run`, `experiments.capacity`,
`experiments.validate` and `experiments.validate.replayed`.

    0 / the body's own   the command finished
    2                    bad input: a ConfigError, TraceError or missing file ("error: ...")
    1                    a results file could not be written (finished work is on disk), or
                         one of the command's own `failures`
    128 + signal         interrupted (130 for Ctrl-C), when the command says what was kept
"""

from __future__ import annotations

import sys
from typing import Callable

from experiments.files.outdir import ResultsWriteError
from sim.util.errors import ConfigError, TraceError

BAD_INPUT = (ConfigError, TraceError, FileNotFoundError)  # exit 2, "error: ..."


def exit_status(body: Callable[[], int], *, written: str | None = None,
                interrupted: str | None = None,
                failures: tuple[type[Exception], ...] = ()) -> int:
    """`body()`'s status, or the status of what it raised, with "error: ..." on stderr.
    `written` (e.g. "the runs finished before it are on disk") follows a results-write error in
    parentheses; `interrupted` is printed on Ctrl-C / SIGTERM (None: the interrupt propagates);
    `failures` are the command's own errors that exit 1."""
    try:
        return body()
    except BAD_INPUT as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except failures as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ResultsWriteError as exc:
        print(f"error: {exc}{f' ({written})' if written else ''}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        if interrupted is None:
            raise
        print(interrupted, file=sys.stderr)
        return 128 + getattr(exc, "signum", 2)
