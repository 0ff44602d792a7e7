"""The command line of `python -m experiments.search` (experiments/search/main.py)."""

from __future__ import annotations

import argparse
from typing import Any, Sequence

from experiments.capacity.args import SETTING_FLAGS
from experiments.search.config import RATE_KEYS

RATE_HELP = {"min_rate": "req/s of a search's first probe", "max_rate": "req/s it stops at",
             "rel_tol": "bisection stops within this fraction", "max_probes": "probes per "
             "candidate and seed at most"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.search",
        description="The cheapest deployment meeting the SLO: enumerate GPU x TP x scheduler "
                    "x batch caps (and disaggregated P:D units), prune what cannot fit or "
                    "meet the SLO, search the capacity of the rest, rank them.")
    parser.add_argument("config", help="YAML search config (docs/search.md)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config field (repeatable), "
                        "e.g. search.max_gpus=2")
    parser.add_argument("--out", help="output directory (default: results/<config name>/)")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="probes in parallel in a local process pool (default 1; the "
                        "results do not depend on it)")
    parser.add_argument("--ray", action="store_true",
                        help="run the probes as Ray tasks, on a Ray cluster beyond one machine "
                        "(RAY_ADDRESS; pip install -e '.[ray]')")
    parser.add_argument("--fresh", action="store_true",
                        help="do not reuse candidates an earlier run into --out finished")
    parser.add_argument("--dry-run", action="store_true",
                        help="enumerate and prune only: write search.csv, simulate nothing")
    parser.add_argument("--no-progress", action="store_true",
                        help="print nothing per probe or candidate")
    kinds = {"max_probes": int}
    for name in RATE_KEYS:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name,
                            type=kinds.get(name, float), default=None,
                            help=f"{RATE_HELP[name]} (default: the config's capacity.{name}, "
                            f"else the capacity command's)")
    for flag, (_, _, kind, what) in SETTING_FLAGS.items():
        parser.add_argument(flag, dest=flag[2:].replace("-", "_"), type=kind, default=None,
                            help=f"{what} (default: the config's capacity section, else the "
                            f"capacity command's)")
    return parser.parse_args(argv)


def capacity_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The capacity options given on the command line (None: not given), by config key."""
    keys = [*RATE_KEYS, *(flag[2:].replace("-", "_") for flag in SETTING_FLAGS)]
    return {key: getattr(args, key) for key in keys}
