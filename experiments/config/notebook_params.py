"""The parameters of experiments/notebooks/throughput_vs_rate.ipynb, read from environment
variables so that the same notebook runs on a user's sweep or, in its test, small:

    RESULTS_DIR                 a sweep's results folder (default ../../results/quickstart,
                                relative to the notebook's folder)
    NOTEBOOK_CAPACITY_REQUESTS  requests per probe of the notebook's capacity search (default 200)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from sim.util.errors import ConfigError

RESULTS_DIR_VAR = "RESULTS_DIR"
CAPACITY_REQUESTS_VAR = "NOTEBOOK_CAPACITY_REQUESTS"
DEFAULT_RESULTS_DIR = "../../results/quickstart"  # relative to the notebook's folder
DEFAULT_CAPACITY_REQUESTS = 200  # requests per capacity probe


@dataclass(frozen=True)
class NotebookParams:
    """What the notebook draws and how large its capacity search is."""

    results_dir: Path  # folder of a sweep's results (summary.csv, runs/)
    capacity_requests: int = DEFAULT_CAPACITY_REQUESTS  # requests per capacity probe

    def __post_init__(self) -> None:
        if not str(self.results_dir).strip():
            raise ConfigError(RESULTS_DIR_VAR, str(self.results_dir), "must name a folder")
        n = self.capacity_requests
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(CAPACITY_REQUESTS_VAR, n,
                              "must be a positive integer (requests per capacity probe)")


def params_from_env(environ: Mapping[str, str]) -> NotebookParams:
    """The notebook's parameters from `environ` (os.environ), defaults where a variable is unset;
    ConfigError naming the variable and its value where it is not usable."""
    results = environ.get(RESULTS_DIR_VAR, DEFAULT_RESULTS_DIR)
    if not results.strip():
        raise ConfigError(RESULTS_DIR_VAR, results, "must name a folder")
    raw = environ.get(CAPACITY_REQUESTS_VAR, str(DEFAULT_CAPACITY_REQUESTS))
    try:
        requests = int(raw.strip())
    except ValueError:
        raise ConfigError(CAPACITY_REQUESTS_VAR, raw,
                          "must be a positive integer (requests per capacity probe)") from None
    return NotebookParams(Path(results), requests)
