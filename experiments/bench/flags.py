"""`vllm bench serve` flags of `python -m experiments.run` as config overrides.

Each flag becomes one or two `--set key=value` overrides, applied after the command's own
`--set`s (docs/workloads.md):

- `--request-rate R[,R...]`: `request_rates=[R, ...]` (numbers or `inf`);
- `--burstiness B`: for a trace `workload.trace.retime=gamma` and `workload.trace.burstiness=B`,
  for a synthetic workload `workload.synthetic.arrival=gamma` and `workload.synthetic.cv` =
  1 / sqrt(B), for vLLM's random dataset `workload.random.burstiness=B` (a multi-client mix or
  sessions workload: an error);
- `--max-concurrency N`: `workload.max_concurrency=N`;
- `--num-prompts N`: `max_requests=N` (and `workload.random.num_requests=N` for the random
  dataset, which draws that many);
- `--seed S[,S...]`: `seeds=[S, ...]`;
- `--dataset-name random` and `--random-input-len` / `-output-len` / `-range-ratio` /
  `-prefix-len`: the random dataset (experiments/bench/dataset_flags.py), applied first.

Values are read as YAML and checked as the config checks them; a bad one is a ConfigError
naming the flag and the value.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Sequence

from experiments.bench.dataset_flags import add_dataset_flags, config_workload, dataset_overrides
from experiments.config.checks import check_positive_number, is_int, is_number
from experiments.config.workload import INF_RATE, KINDS, parse_rate
from experiments.config.yaml_strict import load_yaml
from sim.util.errors import ConfigError


def add_bench_flags(group: argparse._ArgumentGroup) -> None:
    """The flags, as strings (checked by `bench_overrides`), on a parser or argument group."""
    group.add_argument("--request-rate", default=None, metavar="R[,R...]",
                       help="request rates in req/s, or inf (every request at t=0); replaces "
                       "request_rates")
    group.add_argument("--burstiness", default=None, metavar="B",
                       help="Gamma arrivals of shape B (gap CV 1/sqrt(B); 1 = Poisson): a trace "
                       "is re-timed (retime: gamma), a synthetic workload gets arrival: gamma, "
                       "the random dataset burstiness: B")
    group.add_argument("--max-concurrency", default=None, metavar="N",
                       help="at most N requests in the system at once (workload.max_concurrency)")
    group.add_argument("--num-prompts", default=None, metavar="N",
                       help="requests per run: the first N arrivals (max_requests; the random "
                       "dataset draws N)")
    group.add_argument("--seed", default=None, metavar="S[,S...]",
                       help="seeds (replaces seeds)")
    add_dataset_flags(group)


def bench_overrides(args: argparse.Namespace, config: str | Path | None,
                    overrides: Sequence[str] = ()) -> list[str]:
    """`key=value` overrides for the flags set in `args`; `config` and the earlier `overrides`
    tell `--burstiness` which workload it re-times. ConfigError naming a flag and its value."""
    out = dataset_overrides(args, config, overrides)  # first: the others see its workload
    earlier = [*overrides, *out]
    if args.request_rate is not None:
        rates = [_rate(item) for item in _items("--request-rate", args.request_rate)]
        _check_distinct("--request-rate", args.request_rate, rates)
        out.append("request_rates=[" + ", ".join(map(_yaml_number, rates)) + "]")
    if args.seed is not None:
        seeds = [_number("--seed", item, integer=True, zero=True)
                 for item in _items("--seed", args.seed)]
        _check_distinct("--seed", args.seed, seeds)
        out.append("seeds=[" + ", ".join(map(str, seeds)) + "]")
    if args.num_prompts is not None:
        prompts = _number("--num-prompts", args.num_prompts, integer=True)
        out.append(f"max_requests={prompts}")
        if workload_kind(config, earlier) == "random":
            out.append(f"workload.random.num_requests={prompts}")
    if args.max_concurrency is not None:
        value = _number("--max-concurrency", args.max_concurrency, integer=True)
        out.append(f"workload.max_concurrency={value}")
    if args.burstiness is not None:
        out.extend(burstiness_overrides(_number("--burstiness", args.burstiness),
                                        workload_kind(config, earlier)))
    return out


def burstiness_overrides(burstiness: float, kind: str | None) -> list[str]:
    """Overrides re-timing a `kind` workload ("trace" / "synthetic" / "random") with Gamma
    arrivals of shape `burstiness`; None (config unreadable): none, the config's own error
    comes first."""
    if kind == "trace":
        return ["workload.trace.retime=gamma",
                f"workload.trace.burstiness={_yaml_number(burstiness)}"]
    if kind == "synthetic":
        cv = 1.0 / math.sqrt(burstiness)  # traces.arrivals.cv_from_burstiness
        return ["workload.synthetic.arrival=gamma", f"workload.synthetic.cv={cv!r}"]
    if kind == "random":
        return [f"workload.random.burstiness={_yaml_number(burstiness)}"]
    if kind is None:
        return []
    raise ConfigError("--burstiness", burstiness,
                      f"re-times a trace or synthetic workload, not workload.{kind}; a "
                      "multi-client mix sets burstiness per client (workload.clients[i])")


def workload_kind(config: str | Path | None, overrides: Sequence[str]) -> str | None:
    """Which workload the config (with `overrides`) names: trace, synthetic, random, sessions
    or clients; None when the file cannot be read or names none (load_config reports it)."""
    workload = config_workload(config, overrides)
    if not isinstance(workload, dict):
        return None
    kinds = [k for k in KINDS if k in workload]
    return kinds[0] if len(kinds) == 1 else None


# ---- values ---------------------------------------------------------------------------------
def _items(flag: str, text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ConfigError(flag, text, "a comma-separated list with no empty entries")
    return items


def _parse(flag: str, text: str) -> object:
    return load_yaml(text, flag, flag)


def _rate(text: str) -> float:
    """One --request-rate entry: a number > 0 or inf (also .inf)."""
    value = parse_rate(_parse("--request-rate", text))
    if value == INF_RATE:
        return INF_RATE
    if not is_number(value) or not 0 < value < INF_RATE:  # type: ignore[operator]
        raise ConfigError("--request-rate", value, "must be a number > 0 or inf")
    return value  # type: ignore[return-value]


def _number(flag: str, text: str, *, integer: bool = False, zero: bool = False) -> Any:
    """`text` read as YAML: a finite number > 0 (an int when `integer`; >= 0 when `zero`)."""
    value = _parse(flag, text)
    if zero:
        if not is_int(value) or value < 0:  # type: ignore[operator]
            raise ConfigError(flag, value, "must be an int >= 0")
        return value
    check_positive_number(flag, value, integer=integer)
    return value


def _check_distinct(flag: str, text: str, values: Sequence[object]) -> None:
    if len(set(values)) != len(values):
        raise ConfigError(flag, text, "lists a value twice")


def _yaml_number(value: float) -> str:
    """YAML text that the strict loader reads back as `value` (inf: the rate text `inf`)."""
    if value == INF_RATE:
        return "inf"
    return repr(value)
