"""What a run records as it goes: inter-token gaps, steps, events, per-request records, per-
instance accounting, spilled to disk in bounded memory.

May import: sim.util, sim.core."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
