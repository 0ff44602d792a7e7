"""Default price and power of each GPU type: the data the run's cost and energy use.

Price: US dollars per GPU-hour, the public on-demand list price of a major cloud's instance
(Linux, US East) divided by its GPUs. Busy power: the board power limit (TDP) of the datasheet.
Idle power: 15% of it, an approximation of a GPU that holds a model but runs no kernel (bare
idle readings are about 8-12% of TDP on data-centre parts, and holding a CUDA context adds
26-66 W, arXiv 2605.23918). docs/hardware.md ("Cost and energy") lists each figure's source and
date; `cluster.gpu_price_per_hour` and `cluster.power` override them (sim/cluster/run_cost.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from sim.util.errors import ConfigError

IDLE_SHARE_OF_TDP = 0.15  # idle power / TDP of the defaults (a loaded, idle GPU)


@dataclass(frozen=True, slots=True)
class GPUCost:
    """One GPU type's default price and power."""

    price_per_hour: float | None  # US dollars per GPU-hour (on-demand list price); None: no
    # on-demand list price on the same basis (the run's cost is NaN unless priced)
    busy_w: float  # watts per GPU while it runs kernels (datasheet TDP)
    idle_w: float  # watts per GPU while it holds a model and runs nothing

    def __post_init__(self) -> None:
        if self.price_per_hour is not None and not self.price_per_hour > 0:
            raise ConfigError("price_per_hour", self.price_per_hour, "must be > 0")
        if not 0 <= self.idle_w <= self.busy_w:
            raise ConfigError("idle_w", self.idle_w, f"must be in [0, busy_w={self.busy_w}]")


def _cost(price: float | None, tdp_w: float) -> GPUCost:
    return GPUCost(price, tdp_w, round(IDLE_SHARE_OF_TDP * tdp_w, 1))


# name: (instance $/h / GPUs per instance, TDP watts); sources in docs/hardware.md
GPU_COSTS: Mapping[str, GPUCost] = MappingProxyType({
    "V100-32GB": _cost(31.212 / 8, 300),  # AWS p3dn.24xlarge; V100 SXM2 datasheet 300 W
    "A10G": _cost(1.006, 300),  # AWS g5.xlarge; 300 W power limit nvidia-smi reports on g5
    "A100-40GB": _cost(32.7726 / 8, 400),  # AWS p4d.24xlarge; A100 SXM4 datasheet 400 W
    "A100-80GB": _cost(40.9657 / 8, 400),  # AWS p4de.24xlarge; A100 SXM4 datasheet 400 W
    "H100-80GB": _cost(98.32 / 8, 700),  # AWS p5.48xlarge; H100 SXM5 datasheet 700 W
    "H200": _cost(None, 700),  # AWS sold p5e only as Capacity Blocks: no on-demand list price
    # on the table's basis (docs/hardware.md); H200 SXM datasheet 700 W
    "L40S": _cost(1.861, 350),  # AWS g6e.xlarge; L40S datasheet 350 W
    "L4": _cost(0.8048, 72),  # AWS g6.xlarge; L4 datasheet 72 W (a GPU file may name it)
})


def default_cost(gpu_name: str) -> GPUCost | None:
    """The defaults of a GPU by its canonical name (a built-in's, or a GPU file's `name`,
    matched case-insensitively); None for a GPU the table does not list."""
    key = gpu_name.strip().lower()
    for name, cost in GPU_COSTS.items():
        if name.lower() == key:
            return cost
    return None
