"""Fitting and checking cost models: stage parameters from operator profiles, engine terms from a
serving benchmark (vllm bench, SGLang) replayed in the simulator.

May import: sim.util, sim.core, sim.hardware, sim.models, sim.records, sim.cost, sim.measured,
sim.memory, sim.metrics, sim.engine, sim.cluster."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
