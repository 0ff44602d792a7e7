"""A deployment search config: the experiment every candidate shares, the space, the rate search.

    name: search_llama3_8b
    workload: {trace: {name: azure_conv, limit: 300, retime: poisson}}   # as a capacity config
    cluster: {model: llama-3-8b}          # model and defaults; gpu / TP / instances: the search's
    slo: {ttft_s: 0.2, tpot_s: 0.05, attainment: 0.9}
    seeds: [0]
    search: {gpus: [H100-80GB, A100-80GB], max_gpus: 4, ...}   # experiments/search/space.py
    capacity: {min_rate: 0.5, rel_tol: 0.1, probe_s: 60}        # optional: the rate search

`workload`, `slo`, `seeds` (and `max_requests`, `duration_s`) are exactly a capacity config's;
`capacity:` takes the capacity command's options by name (min_rate, max_rate, rel_tol,
max_probes, warmup_frac, drain_frac, steady_tol, probe_s, probe_kv, probe_doublings), each
overridden by the same flag on the command line. Errors are ConfigErrors naming the field.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from experiments.capacity.args import SETTING_FLAGS, search_from_args, settings_from_args
from experiments.capacity.bisect import SearchConfig
from experiments.capacity.probe import ProbeSettings
from experiments.config.checks import mapping
from experiments.config.experiment import ExperimentConfig, check_name, experiment_from_dict
from experiments.config.load import apply_overrides, load_yaml_file
from experiments.search.space import DeploymentSpace, space_from_dict
from sim.util.errors import ConfigError, check_keys

SHARED_KEYS = ("workload", "cluster", "slo", "seeds", "max_requests",
               "duration_s")  # experiment sections every candidate's config carries as written
TOP_LEVEL_KEYS = ("name", *SHARED_KEYS, "search", "capacity")
PICKED = ("gpu", "tensor_parallel", "pipeline_parallel", "num_instances",
          "instances")  # cluster fields the search sets
RATE_KEYS = ("min_rate", "max_rate", "rel_tol", "max_probes")  # capacity: the rate search
# capacity: the probe settings, by the capacity command's flag names (--probe-s -> probe_s)
SETTING_KEYS = {flag[2:].replace("-", "_"): dest for flag, (_, dest, _, _) in
                SETTING_FLAGS.items()}


@dataclass(frozen=True)
class SearchExperiment:
    """A deployment search: what every candidate shares, what it varies, how rates are searched."""

    name: str  # names the results directory (results/<name>) and the candidates' configs
    shared: Mapping[str, Any]  # SHARED_KEYS sections as written (each candidate's config has them)
    space: DeploymentSpace  # the candidates' dimensions
    rates: SearchConfig = SearchConfig()  # the capacity rate search (doubling, bisection)
    settings: ProbeSettings = ProbeSettings()  # probe length and steady-state rules

    def __post_init__(self) -> None:
        check_name("name", self.name)
        if self.shared.get("slo") is None:
            raise ConfigError("slo", None, "a deployment search needs latency targets, e.g. slo: "
                              "{ttft_s: 0.2, tpot_s: 0.05, attainment: 0.9}")
        cluster = mapping("cluster", self.shared.get("cluster"))
        for key in PICKED:
            if key in cluster:
                raise ConfigError(f"cluster.{key}", cluster[key], "the search picks it (search."
                                  "gpus, search.tensor_parallel, search.pipeline_parallel, "
                                  "search.disagg): leave it out")
        self.experiment([{"name": "vllm", "cluster": {"gpu": self.space.gpus[0]}}])

    def experiment(self, entries: Sequence[Mapping[str, Any]],
                   name: str | None = None) -> ExperimentConfig:
        """The capacity experiment of policy entries `entries` on the shared sections."""
        from experiments.capacity.main import CapacityExperiment

        raw = {**self.raw_experiment(entries), "name": name or self.name}
        return experiment_from_dict(raw, self.name, cls=CapacityExperiment)

    def raw_experiment(self, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The shared sections and `entries` as a plain experiment config dict."""
        shared = {k: v for k, v in self.shared.items() if v is not None}
        return {"name": self.name, **shared, "policies": [dict(e) for e in entries]}


def capacity_options(raw: Mapping[str, Any],
                     flags: Mapping[str, Any] | None = None) -> tuple[SearchConfig, ProbeSettings]:
    """The `capacity:` section (command-line values in `flags` win; None: not given) as the
    capacity search's rate search and probe settings; ConfigError naming `capacity.<key>`."""
    check_keys("capacity", raw, (*RATE_KEYS, *SETTING_KEYS, "early_stop"))
    given = {**raw, **{k: v for k, v in (flags or {}).items() if v is not None}}
    early_stop = given.pop("early_stop", True)  # a search stops a certainly failing probe
    if not isinstance(early_stop, bool):
        raise ConfigError("capacity.early_stop", early_stop, "must be true or false")
    rules = ProbeSettings()
    ns = {**asdict(SearchConfig()), **asdict(rules.steady), **asdict(rules.length)}
    ns.update({SETTING_KEYS.get(key, key): value for key, value in given.items()})
    args = argparse.Namespace(**ns, early_stop=early_stop)
    by_flag = {f"--{k.replace('_', '-')}": f"capacity.{k}" for k in (*RATE_KEYS, *SETTING_KEYS)}
    try:
        return search_from_args(args), settings_from_args(args)
    except ConfigError as err:
        raise ConfigError(by_flag.get(err.field, err.field), err.value, err.reason) from None


def search_from_dict(raw: object, default_name: str,
                     flags: Mapping[str, Any] | None = None) -> SearchExperiment:
    """A parsed search config as a SearchExperiment (every error naming its field)."""
    raw = mapping("config", raw)
    check_keys("", raw, TOP_LEVEL_KEYS)
    if raw.get("search") is None:
        raise ConfigError("search", None, "required: the space to search (gpus, max_gpus, ...)")
    rates, settings = capacity_options(mapping("capacity", raw.get("capacity")), flags)
    return SearchExperiment(name=raw.get("name", default_name),
                            shared={k: raw[k] for k in SHARED_KEYS if k in raw},
                            space=space_from_dict(raw["search"]), rates=rates,
                            settings=settings)


def load_search_config(path: str | Path, overrides: Sequence[str] = (),
                       flags: Mapping[str, Any] | None = None) -> SearchExperiment:
    """A search config file, with `--set key.path=value` overrides and command-line flags."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    return search_from_dict(apply_overrides(load_yaml_file(path) or {}, overrides), path.stem,
                            flags)
