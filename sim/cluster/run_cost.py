"""A run's dollar cost and GPU energy, from its instances' wall and device time.

Every instance holds `tensor_parallel` GPUs for the whole run (its wall time, `duration_s`), so
cost = GPUs x duration x price per GPU-hour. Power is linear in the GPU's busy share: a GPU
draws idle_w + (busy_w - idle_w) x busy share, the busy share being the instance's device
seconds (`gpu_busy_s`) over the wall seconds; energy = GPUs x (idle_w x duration + (busy_w -
idle_w) x gpu_busy_s). Defaults per GPU type come from sim/hardware/gpu_costs.py;
`cluster.gpu_price_per_hour` and `cluster.power: {idle_w, busy_w}` override them for every
instance. A GPU the table does not list and no override prices gives NaN figures.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from sim.hardware.gpu_costs import default_cost
from sim.util.errors import ConfigError

POWER_KEYS = ("idle_w", "busy_w")  # cluster.power keys: watts per GPU
SECONDS_PER_HOUR = 3600.0  # seconds
COST_KEYS = ("gpu_hours", "cost_usd", "usd_per_m_output_tokens", "usd_per_m_total_tokens",
             "energy_j", "j_per_output_token", "j_per_request", "avg_power_w")  # summary keys


def _check_number(field: str, value: object, *, allow_zero: bool) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):  # type: ignore[operator]
        raise ConfigError(field, value, "must be a finite number " +
                          (">= 0" if allow_zero else "> 0"))
    return float(value)  # type: ignore[arg-type]


def check_cost_options(price: float | None, power: Mapping[str, Any]) -> None:
    """ConfigError naming `cluster.gpu_price_per_hour` or `cluster.power.<key>` when a value
    is not a finite number > 0 (idle_w: >= 0), a key is unknown, or idle_w > busy_w."""
    if price is not None:
        _check_number("cluster.gpu_price_per_hour", price, allow_zero=False)
    for key in power:
        if key not in POWER_KEYS:
            raise ConfigError(f"cluster.power.{key}", power[key],
                              f"unknown; known: {', '.join(POWER_KEYS)}")
    if "idle_w" in power:
        _check_number("cluster.power.idle_w", power["idle_w"], allow_zero=True)
    if "busy_w" in power:
        _check_number("cluster.power.busy_w", power["busy_w"], allow_zero=False)
    if "idle_w" in power and "busy_w" in power and power["idle_w"] > power["busy_w"]:
        raise ConfigError("cluster.power.idle_w", power["idle_w"],
                          f"must be <= cluster.power.busy_w ({power['busy_w']})")


def gpu_rates(gpu_name: str, price: float | None,
              power: Mapping[str, Any]) -> tuple[float, float, float]:
    """(price per GPU-hour, idle W, busy W) of a GPU: the overrides, else its defaults (NaN
    where neither gives one); ConfigError naming cluster.power when an override of one power
    crosses the default of the other."""
    cost = default_cost(gpu_name)
    nan = float("nan")
    listed = cost.price_per_hour if cost is not None else None
    rate = price if price is not None else (listed if listed is not None else nan)
    idle = float(power.get("idle_w", cost.idle_w if cost else nan))
    busy = float(power.get("busy_w", cost.busy_w if cost else nan))
    if idle > busy:
        key = "idle_w" if "idle_w" in power else "busy_w"
        raise ConfigError(f"cluster.power.{key}", power[key], f"idle_w {idle} W exceeds busy_w "
                          f"{busy} W of {gpu_name}")
    return float(rate), idle, busy


def cost_summary(gpus: Sequence[tuple[str, int]], gpu_busy_s: Sequence[float],
                 duration_s: float, output_tokens: int, total_tokens: int, completed: int,
                 price: float | None = None,
                 power: Mapping[str, Any] | None = None) -> dict[str, float]:
    """COST_KEYS of a run: `gpus` is each instance's (GPU name, GPUs), `gpu_busy_s` its device
    seconds, in the same order; tokens and requests are those of completed requests."""
    dollars = joules = gpu_s = 0.0
    for (name, count), busy_s in zip(gpus, gpu_busy_s, strict=True):
        rate, idle_w, busy_w = gpu_rates(name, price, power or {})
        busy_s = min(max(float(busy_s), 0.0), duration_s)  # a share in [0, 1] of the wall time
        gpu_s += count * duration_s
        dollars += count * duration_s / SECONDS_PER_HOUR * rate
        joules += count * (idle_w * duration_s + (busy_w - idle_w) * busy_s)
    nan = float("nan")
    return {
        "gpu_hours": gpu_s / SECONDS_PER_HOUR,
        "cost_usd": dollars,
        "usd_per_m_output_tokens": dollars / output_tokens * 1e6 if output_tokens else nan,
        "usd_per_m_total_tokens": dollars / total_tokens * 1e6 if total_tokens else nan,
        "energy_j": joules,
        "j_per_output_token": joules / output_tokens if output_tokens else nan,
        "j_per_request": joules / completed if completed else nan,
        "avg_power_w": joules / duration_s if duration_s > 0 else nan,
    }


COST_COLUMNS = ("status", "prompt_tokens", "output_tokens")  # the record columns read


def run_cost_summary(cluster: Any, records: pd.DataFrame, instances: pd.DataFrame,
                     duration_s: float) -> dict[str, float]:
    """COST_KEYS of a run of `cluster` (a sim.cluster.spec.ClusterSpec) from its records and its
    instances table (`gpu_busy_s` per instance, in instance order)."""
    from sim.cluster.heterogeneous import instance_specs
    from sim.hardware.gpu_file import resolve_gpu

    gpus = [(resolve_gpu(one.gpu).name, one.tensor_parallel) for one in instance_specs(cluster)
            for _ in range(one.pipeline_parallel)]  # a pipeline: one virtual instance a stage
    done = records.loc[records["status"] == "finished", ["prompt_tokens", "output_tokens"]]
    output = int(done["output_tokens"].sum())
    busy = instances.sort_values("instance_id")["gpu_busy_s"].tolist()
    return cost_summary(gpus, busy, duration_s, output, output + int(done["prompt_tokens"].sum()),
                        len(done), cluster.gpu_price_per_hour, cluster.power)
