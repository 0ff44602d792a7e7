"""Model shapes: `ModelSpec`, the built-in catalog, and Hugging Face config.json files (dense, MoE,
MLA, Falcon) read safely.

May import: sim.util."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
