"""The request-class sections of an experiment config (docs/classes.md).

    classes:                     # per request class (the workload's `class` column)
      interactive: {priority: 0, timeout_s: 5, slo: {ttft_s: 0.5, tpot_s: 0.1}}
      batch: {priority: 1, slo: {e2e_s: 600}}
    admission:                   # admission control (sim/engine/admission.py), every limit optional
      rate_per_s: 20             # token bucket refill, requests/s
      burst: 40                  # token bucket size, requests
      max_waiting: 64            # requests waiting in the system
      max_predicted_wait_s: 10   # predicted queueing delay, seconds
      window_s: 10               # seconds of completions the prediction reads
      classes: {batch: {max_waiting: 16}}

A class's `priority` and `timeout_s` set those of every request of the class (over the trace's
own values); `default` names the requests without a class (all of them when the workload has
no `class` column). A class's `slo` replaces the experiment's `slo` for that class's per-class
attainment and goodput. A policy entry may carry its own `admission` (a mapping, or null for
none) instead of the experiment's, and its own `classes` laid over the experiment's (a class's
fields there win: `classes: {interactive: {timeout_s: 5}}` adds a timeout to that entry's runs).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from experiments.config.checks import mapping
from sim.engine.admission import AdmissionConfig, AdmissionLimits
from sim.metrics.class_metrics import NO_CLASS
from sim.metrics.slo import SLO
from sim.util.errors import ConfigError, TraceError, check_keys
from sim.util.schema import build, rebase
from traces.class_columns import CLASS_NAME, PRIORITY_RANGE

CLASS_KEYS = ("priority", "timeout_s", "slo")  # keys of one class's section
CANCELLING_POLICIES = ("vllm", "vllm_v0", "sarathi", "orca")  # policies that take timeouts


@dataclass(frozen=True)
class ClassSpec:
    """One request class's settings."""

    priority: int | None = None  # sets its requests' priority (lower is more important)
    timeout_s: float | None = None  # seconds: its clients give up that long after arrival
    slo: SLO | None = None  # its latency targets (default: the experiment's slo)

    def __post_init__(self) -> None:
        p = self.priority
        if p is not None and (isinstance(p, bool) or not isinstance(p, int)
                              or not PRIORITY_RANGE[0] <= p <= PRIORITY_RANGE[1]):
            raise ConfigError("priority", p, "must be an int (lower is more important)")
        t = self.timeout_s
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float))
                              or not 0 < t < math.inf):
            raise ConfigError("timeout_s", t, "must be a number of seconds > 0")
        if self.slo is not None and self.slo.tbt_p99_s is not None:
            raise ConfigError("slo.tbt_p99_s", self.slo.tbt_p99_s, "a class has no gap "
                              "percentiles of its own (gaps are kept per run): bound each "
                              "request's largest gap with tbt_s (attainment form)")


def classes_from_dict(value: object, prefix: str = "classes") -> dict[str, ClassSpec]:
    """`classes`: {class name: {priority, timeout_s, slo}} (errors named under `prefix`)."""
    out = {}
    for name, item in mapping(prefix, value).items():
        where = f"{prefix}.{name}"
        if not isinstance(name, str) or not CLASS_NAME.match(name):
            raise ConfigError(where, name, "a class name is 1-64 letters, digits, '_', '-', "
                                           "'.' or ':'")
        fields = mapping(where, item)
        check_keys(where, fields, CLASS_KEYS)
        if fields.get("slo") is not None:
            fields["slo"] = build(SLO, f"{where}.slo", mapping(f"{where}.slo", fields["slo"]),
                                  "slo.")
        out[name] = build(ClassSpec, where, fields)
    return out


def admission_from_dict(value: object, where: str = "admission") -> AdmissionConfig | None:
    """An `admission` mapping (None for null)."""
    if value is None:
        return None
    fields = mapping(where, value)
    classes = mapping(f"{where}.classes", fields.pop("classes", None))
    limits = {name: build(AdmissionLimits, f"{where}.classes.{name}",
                          mapping(f"{where}.classes.{name}", item))
              for name, item in classes.items()}
    try:
        return build(AdmissionConfig, where, {**fields, "classes": limits})
    except ConfigError as err:
        raise rebase(where, err) from None


def check_classes_support(policy: str, backend: str, admission: AdmissionConfig | None,
                          classes: Mapping[str, ClassSpec], where: str) -> None:
    """ConfigError when a run cannot honour its timeouts or admission control."""
    timeouts = [name for name, spec in classes.items() if spec.timeout_s is not None]
    if backend == "real" and (timeouts or admission is not None):
        what = "admission" if admission is not None else f"classes.{timeouts[0]}.timeout_s"
        raise ConfigError("cluster.backend", backend, f"{what} is set, but admission control "
                                                      f"and client timeouts run with backend: "
                                                      f"sim only")
    if timeouts and policy not in CANCELLING_POLICIES:
        raise ConfigError(f"{where}.name", policy,
                          f"cannot cancel requests, but classes.{timeouts[0]}.timeout_s is set: "
                          f"client timeouts run with {', '.join(CANCELLING_POLICIES)}")


def merge_classes(base: Mapping[str, ClassSpec],
                  over: Mapping[str, ClassSpec]) -> dict[str, ClassSpec]:
    """`base` with each class of `over` laid on it, field by field (its set fields win)."""
    out = dict(base)
    for name, spec in over.items():
        own = {k: v for k, v in dataclasses.asdict(spec).items() if v is not None}
        if spec.slo is not None:
            own["slo"] = spec.slo  # asdict made it a dict
        out[name] = dataclasses.replace(out[name], **own) if name in out else spec
    return out


def apply_classes(df: pd.DataFrame, classes: Mapping[str, ClassSpec]) -> pd.DataFrame:
    """`df` with each class's priority and timeout_s set on its requests (unchanged when no
    class sets either)."""
    setting = {n: s for n, s in classes.items()
               if s.priority is not None or s.timeout_s is not None}
    if not setting:
        return df
    if "class" in df.columns:
        labels = np.asarray([NO_CLASS if c is None or c != c else c for c in df["class"]],
                            dtype=object)
    else:
        labels = np.full(len(df), NO_CLASS, dtype=object)
        stray = [n for n in setting if n != NO_CLASS]
        if stray:
            raise TraceError("workload", f"classes.{stray[0]} sets priority / timeout_s but the "
                             f"workload has no class column (only `default` applies)",
                             field="class")
    df = df.copy()
    for name, spec in setting.items():
        rows = labels == name
        if spec.priority is not None:
            if "priority" not in df.columns:
                df["priority"] = np.zeros(len(df), dtype=np.int64)
            df.loc[rows, "priority"] = spec.priority
        if spec.timeout_s is not None:
            if "timeout_s" not in df.columns:
                df["timeout_s"] = np.full(len(df), np.nan)
            df.loc[rows, "timeout_s"] = float(spec.timeout_s)
    return df


def class_slos(classes: Mapping[str, ClassSpec], default: SLO | None,
               names: Any) -> dict[str, SLO]:
    """Class name -> its SLO (its own, else `default`) for each of `names` that has one."""
    out = {}
    for name in names:
        spec = classes.get(name)
        slo = spec.slo if spec is not None and spec.slo is not None else default
        if slo is not None:
            out[name] = slo
    return out


def identity(classes: Mapping[str, ClassSpec],
             admission: AdmissionConfig | None) -> dict[str, Any]:
    """What the class sections add to a run's identity ({} when neither is set, so other runs
    keep theirs)."""
    out: dict[str, Any] = {}
    if classes:
        out["classes"] = {n: dataclasses.asdict(s) for n, s in classes.items()}
    if admission is not None:
        out["admission"] = dataclasses.asdict(admission)
    return out
