"""KV memory: the paged block manager (vLLM's), the block counter, prefix keys, KV tiers (host
memory, remote store) and the links KV moves over.

May import: sim.util, sim.core, sim.cost, sim.measured."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
