"""GPUs: datasheet numbers (`gpus`), user-defined GPU files, and price and power per GPU type.

May import: sim.util."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
