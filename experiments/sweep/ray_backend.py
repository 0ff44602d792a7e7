"""Sweep runs as Ray tasks, so a sweep that outgrows one machine runs on a Ray cluster.

`ray.init()` honours RAY_ADDRESS (e.g. `ray://head:10001` or `auto` on a cluster node); without
it a local Ray instance starts. Workers return results to the driver, which persists them, so the
cluster needs no shared filesystem; each worker reports a digest of the trace file it read, and
the driver refuses results read from a different version of it. When the driver stops early
(Ctrl-C, a write error) the tasks still queued are cancelled.
Install with `pip install -e ".[ray]"`.
"""

from __future__ import annotations

import os
from typing import Callable, Iterator, TypeVar

from sim.util.errors import ConfigError

Cfg = TypeVar("Cfg")  # the experiment config (experiments.config.experiment.ExperimentConfig)
Spec = TypeVar("Spec")  # one run (experiments.sweep.runner.RunSpec)
Out = TypeVar("Out")  # what a run returns (experiments.sweep.runner.RunOutput)


def ray_outputs(simulate_run: Callable[[Cfg, Spec], Out], cfg: Cfg,
                specs: list[Spec]) -> Iterator[Out]:
    """Submit one Ray task `simulate_run(cfg, spec)` per run (experiments.sweep.runner passes its
    own, so the two modules do not import each other); yield outputs in completion order."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray", True, "Ray is not installed: pip install -e '.[ray]'") from None

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)
    task = ray.remote(simulate_run)
    cfg_ref = ray.put(cfg)
    pending = [task.remote(cfg_ref, spec) for spec in specs]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:  # interrupted, or the driver failed to write: stop the runs still queued
        for ref in pending:
            ray.cancel(ref, force=True)
