"""`vllm bench serve`'s random dataset flags of `python -m experiments.run` as config overrides.

`--dataset-name random` replaces the config's workload with vLLM's random dataset
(`workload.random`, traces/random_dataset.py), keeping its `max_concurrency`; the `--random-*`
flags set its fields, leaving the others at vLLM's defaults (or, when the config's workload is
already `random`, at the config's values):

- `--random-input-len N`: `workload.random.input_len`;
- `--random-output-len N`: `workload.random.output_len`;
- `--random-range-ratio R`: `workload.random.range_ratio` (in [0, 1));
- `--random-prefix-len N`: `workload.random.prefix_len`.

`--num-prompts`, `--burstiness` and `--request-rate` then apply to it as to any workload
(experiments/bench/flags.py). A `--random-*` flag without `--dataset-name random` needs a config
whose workload is `random`. A bad value is a ConfigError naming the flag and the value.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Sequence

from experiments.config.load import apply_overrides, load_yaml_file
from experiments.config.yaml_strict import load_yaml
from sim.util.errors import ConfigError
from traces.random_dataset import RandomDataset

DATASET_NAMES = ("random",)  # the --dataset-name values a simulation has a generator for
RANDOM_FLAGS: dict[str, str] = {  # flag -> workload.random field
    "--random-input-len": "input_len",
    "--random-output-len": "output_len",
    "--random-range-ratio": "range_ratio",
    "--random-prefix-len": "prefix_len",
}


def add_dataset_flags(group: argparse._ArgumentGroup) -> None:
    """--dataset-name and the --random-* flags, as strings (checked by `dataset_overrides`)."""
    group.add_argument("--dataset-name", default=None, metavar="random",
                       help="random: vLLM's random dataset replaces the config's workload "
                       "(workload.random; lengths drawn as vLLM draws them)")
    defaults = RandomDataset()
    helps = {"input_len": "prompt tokens drawn per request, before the prefix",
             "output_len": "output tokens per request",
             "range_ratio": "lengths uniform in [floor(N*(1-R)), ceil(N*(1+R))], R in [0, 1)",
             "prefix_len": "tokens every prompt starts with (one shared prefix)"}
    for flag, field in RANDOM_FLAGS.items():
        group.add_argument(flag, default=None, metavar="R" if field == "range_ratio" else "N",
                           help=f"{helps[field]} (default {getattr(defaults, field):g})")


def dataset_overrides(args: argparse.Namespace, config: str | Path | None,
                      overrides: Sequence[str] = ()) -> list[str]:
    """`key=value` overrides for --dataset-name and the --random-* flags set in `args`; the
    config (with the earlier `overrides`) says whether its workload is already `random`."""
    given = {field: _value(flag, getattr(args, _dest(flag)))
             for flag, field in RANDOM_FLAGS.items() if getattr(args, _dest(flag)) is not None}
    name = args.dataset_name
    if name is not None and name not in DATASET_NAMES:
        raise ConfigError("--dataset-name", name,
                          f"the simulator generates {', '.join(DATASET_NAMES)}; replay another "
                          "dataset's requests as a trace (workload.trace)")
    if name is None and not given:
        return []
    workload = config_workload(config, overrides)
    current = workload.get("random") if isinstance(workload, dict) else None
    if name is None and not isinstance(current, dict):
        flag = next(f for f, field in RANDOM_FLAGS.items() if field in given)
        raise ConfigError(flag, given[RANDOM_FLAGS[flag]], "takes --dataset-name random (or a "
                          "config whose workload is random)")
    fields = {**(current if isinstance(current, dict) else {}), **given}
    check_random(fields, set(given))
    if isinstance(current, dict):
        return [f"workload.random.{field}={value!r}" for field, value in given.items()]
    new: dict[str, Any] = {"random": given}
    if isinstance(workload, dict) and workload.get("max_concurrency") is not None:
        new["max_concurrency"] = workload["max_concurrency"]
    return [f"workload={_flow(new)}"]


def check_random(fields: dict[str, Any], flagged: set[str]) -> None:
    """ConfigError naming the --random-* flag (the config field when the value is not from a
    flag, in `flagged`) of a value, or a combination, that RandomDataset refuses."""
    try:
        RandomDataset(**{k: v for k, v in fields.items() if k in RANDOM_FLAGS.values()})
    except ConfigError as err:
        field = err.field.removeprefix("random.")
        flag = next((f for f, name in RANDOM_FLAGS.items() if name == field in flagged), None)
        raise ConfigError(flag or f"workload.random.{field}", err.value, err.reason) from None
    except TypeError:  # a config value of the wrong type: the config's own check names it
        return


def config_workload(config: str | Path | None, overrides: Sequence[str]) -> Any:
    """The config's `workload` mapping with `overrides` applied; None when the file cannot be
    read (load_config reports that)."""
    if config is None or not Path(config).is_file():
        return None
    raw: Any = apply_overrides(load_yaml_file(config) or {}, overrides)
    return raw.get("workload") if isinstance(raw, dict) else None


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _value(flag: str, text: str) -> int | float:
    """A --random-* value read as YAML: an int (a number for --random-range-ratio)."""
    value = load_yaml(text, flag, flag)
    ratio = flag == "--random-range-ratio"
    ok = isinstance(value, (int, float)) if ratio else isinstance(value, int)
    if isinstance(value, bool) or not ok:
        raise ConfigError(flag, value, "must be a number" if ratio else "must be an int")
    return value


def _flow(value: dict[str, Any]) -> str:
    """`value` (nested dicts of numbers) as a YAML flow mapping."""
    items = [f"{k}: {_flow(v) if isinstance(v, dict) else repr(v)}" for k, v in value.items()]
    return "{" + ", ".join(items) + "}"
