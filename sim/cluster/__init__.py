"""A cluster spec and the simulated executors it builds: cost-model choice, heterogeneous
instances, draft models, Medusa heads, LoRA adapters, the HF static engine, and a run's dollar
cost and energy.

May import: sim.util, sim.core, sim.hardware, sim.models, sim.records, sim.cost, sim.measured,
sim.memory, sim.metrics, sim.engine."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
