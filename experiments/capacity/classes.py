"""Per-class SLOs in a capacity search (docs/classes.md, docs/policies.md).

When any request class of a policy entry has its own `slo` (`classes: {NAME: {slo: ...}}`, the
experiment's or the entry's), a probe passes only when **every** class of the workload that has
an SLO (its own, else the experiment's `slo`) meets it on its measured requests; a class with
neither is not checked, and the search says so. Without class SLOs the experiment's `slo` is read
on all measured requests together, as before. A class SLO the search cannot check (the workload
has no request of that class, or no classes at all) is refused before any probe runs.
"""

from __future__ import annotations

from typing import Any, Mapping

import pandas as pd

from experiments.config.classes import class_slos
from experiments.config.experiment import ExperimentConfig
from experiments.sweep.workload import build_workload
from sim.metrics.class_metrics import class_labels, class_metrics
from sim.metrics.slo import SLO, good_requests, slo_violations
from sim.util.errors import ConfigError


def own_class_slos(cfg: ExperimentConfig, index: int) -> dict[str, str]:
    """Class name -> the config field of its own SLO, for policy entry `index`'s classes."""
    entry = cfg.policies[index]
    out = {name: f"classes.{name}.slo" for name, spec in cfg.classes.items()
           if spec.slo is not None}
    out.update({name: f"policies[{index}].classes.{name}.slo"
                for name, spec in entry.classes.items() if spec.slo is not None})
    return out


def probe_slos(cfg: ExperimentConfig, index: int, labels: Any) -> dict[str, SLO] | None:
    """Class name -> SLO for the classes in `labels` (None: no class has its own SLO, so
    the experiment's slo reads all measured requests together)."""
    if not own_class_slos(cfg, index):
        return None
    return class_slos(cfg.classes_for(cfg.policies[index]), cfg.slo, labels)


def check_class_slos(cfg: ExperimentConfig, base: pd.DataFrame | None, rate: float) -> list[str]:
    """One line per policy entry with class SLOs saying which classes are checked; ConfigError
    naming the field when an entry has no SLO at all or a class SLO cannot be checked."""
    lines = []
    for index, entry in enumerate(cfg.policies):
        own = own_class_slos(cfg, index)
        if not own:
            if cfg.slo is None:
                raise ConfigError("slo", None, f"capacity search needs latency targets for "
                                  f"policies[{index}] ({entry.label}): set slo, or a class slo")
            continue
        labels = class_labels(build_workload(cfg, base, rate, cfg.seeds[0], entry))
        present = set() if labels is None else set(labels)
        for name, field in own.items():
            if name not in present:
                found = ", ".join(sorted(present)) or "none"
                raise ConfigError(field, name, f"the workload has no request of class {name} "
                                  f"(its classes: {found}), so the capacity search cannot "
                                  f"check this SLO")
        slos = probe_slos(cfg, index, present)
        assert slos is not None
        free = sorted(present - set(slos))
        lines.append(f"{entry.label}: per-class SLOs, a rate passes only when every class meets "
                     f"its own: {', '.join(sorted(slos))}"
                     + (f"; no SLO, not checked: {', '.join(free)}" if free else ""))
    return lines


def class_verdicts(rows: pd.DataFrame, window_s: float, slos: Mapping[str, SLO],
                   p99_itl_s: float) -> tuple[dict[str, float], list[str]]:
    """On the measured requests `rows`: `class.<name>.slo_attainment` / `.goodput` for each
    class with an SLO, `num_good` and `num_judged` (requests of those classes); and why
    classes missed ([] when all met)."""
    labels = class_labels(rows)
    out: dict[str, float] = {"num_good": 0, "num_judged": 0}
    missed = []
    for name, slo in slos.items():
        group = rows[(labels == name).to_numpy()] if labels is not None else rows.iloc[:0]
        good = int(good_requests(group, slo).sum()) if len(group) else 0
        attainment = good / len(group) if len(group) else float("nan")
        out[f"class.{name}.slo_attainment"] = attainment
        out[f"class.{name}.goodput"] = good / window_s if window_s > 0 else float("nan")
        out["num_good"] += good
        out["num_judged"] += len(group)
        metrics = {**class_metrics(group, window_s), "slo_attainment": attainment,
                   "p99_itl_s": p99_itl_s} if len(group) else {}
        why = slo_violations(metrics, slo) if len(group) else ["no measured requests"]
        missed += [f"class {name}: {reason}" for reason in why]
    return out, missed

