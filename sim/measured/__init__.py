"""Cost models from measurements: Vidur-format and real.profile tables, their interpolation, and
calibration files of the real backend (plain JSON, never code).

May import: sim.util, sim.core, sim.hardware, sim.models, sim.cost."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
