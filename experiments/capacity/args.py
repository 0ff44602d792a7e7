"""The command line of `python -m experiments.capacity` (experiments/capacity/main.py)."""

from __future__ import annotations

import argparse
from typing import Sequence

from experiments.capacity.bisect import SearchConfig
from experiments.capacity.probe import ProbeSettings
from experiments.capacity.probe_length import ProbeRule
from sim.metrics.steady import SteadyRule
from sim.util.errors import ConfigError

SEED_AGGREGATES = ("min", "mean")  # how a policy's capacity is read from its seeds'
# command-line flag -> (settings part, field, type, help) of the steady-state and length rules
SETTING_FLAGS = {
    "--warmup-frac": ("steady", "warmup_frac", float, "fraction of a probe's arrival window "
                      "excluded at its start"),
    "--drain-frac": ("steady", "drain_frac", float, "fraction excluded at its end"),
    "--steady-tol": ("steady", "tolerance", float, "largest shortfall of delivered against "
                     "offered, and growth of the requests in the system, as a fraction of "
                     "offered (1: never flag)"),
    "--probe-s": ("length", "min_window_s", float, "seconds of arrivals a probe spans at "
                  "least (0: off)"),
    "--probe-kv": ("length", "kv_multiple", float, "a probe offers at least this many times "
                   "the cluster's KV capacity in tokens (0: off)"),
    "--probe-doublings": ("length", "max_doublings", int, "times a probe meeting the SLO but "
                          "not steady reruns with twice the requests"),
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m experiments.capacity",
                                     description="Highest request rate meeting the SLO.")
    parser.add_argument("config", nargs="?", help="YAML experiment config with an slo: section")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a config field (repeatable)")
    parser.add_argument("--out", help="output directory (default: results/<config name>/)")
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="probes in parallel in a local process pool (default 1; the "
                        "results do not depend on it)")
    parser.add_argument("--seed-aggregate", choices=SEED_AGGREGATES, default="min",
                        help="a policy's capacity from its seeds' (default min)")
    parser.add_argument("--plot-only", metavar="OUT", default=None,
                        help="redraw OUT/capacity.png from a finished search and exit")
    parser.add_argument("--rates", default=None, metavar="R,R,...",
                        help="no search: probe these rates (req/s) and print each verdict, e.g. "
                        "a long check of a capacity with --probe-s 1800")
    parser.add_argument("--no-progress", action="store_true",
                        help="print nothing per probe or policy")
    parser.add_argument("--ray", action="store_true",
                        help="run the probes as Ray tasks (RAY_ADDRESS names a cluster; "
                        "pip install -e '.[ray]')")
    parser.add_argument("--early-stop", action="store_true",
                        help="stop a probe as soon as it certainly misses an attainment-form "
                        "SLO (faster; its capacity_probes.csv row keeps the verdict, not the "
                        "metrics)")
    defaults = SearchConfig()
    for name, kind in (("min_rate", float), ("max_rate", float), ("rel_tol", float),
                       ("max_probes", int)):
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind,
                            default=getattr(defaults, name),
                            help=f"default {getattr(defaults, name)}")
    steady, length = SteadyRule(), ProbeRule()
    for flag, (owner, name, kind, what) in SETTING_FLAGS.items():
        parser.add_argument(flag, dest=name, type=kind,
                            default=getattr(steady if owner == "steady" else length, name),
                            help=f"{what} (default %(default)g)")
    args = parser.parse_args(argv)
    if args.config is None and args.plot_only is None:
        parser.error("a CONFIG file is required (or --plot-only OUT)")
    return args


def settings_from_args(args: argparse.Namespace) -> ProbeSettings:
    """The probe settings of the command line; ConfigError naming the flag of a bad value."""
    flags = {name: flag for flag, (_, name, _, _) in SETTING_FLAGS.items()}
    try:
        return ProbeSettings(SteadyRule(args.warmup_frac, args.drain_frac, args.tolerance),
                             ProbeRule(args.min_window_s, args.kv_multiple, args.max_doublings),
                             getattr(args, "early_stop", False))
    except ConfigError as err:
        raise ConfigError(flags.get(err.field, err.field), err.value, err.reason) from None


def parse_rates(text: str) -> list[float]:
    """`--rates 28,30,32.5` as req/s; ConfigError naming --rates for a bad one."""
    rates = []
    for item in text.split(","):
        try:
            rate = float(item)
        except ValueError:
            raise ConfigError("--rates", text, f"{item!r} is not a number") from None
        if not 0 < rate < float("inf"):
            raise ConfigError("--rates", text, "each rate must be finite and > 0 (req/s)")
        rates.append(rate)
    return rates


def search_from_args(args: argparse.Namespace) -> SearchConfig:
    """The search bounds of the command line; ConfigError naming the flag of a bad value."""
    try:
        return SearchConfig(args.min_rate, args.max_rate, args.rel_tol, args.max_probes)
    except ConfigError as err:
        raise ConfigError(f"--{err.field.replace('_', '-')}", err.value, err.reason) from None
