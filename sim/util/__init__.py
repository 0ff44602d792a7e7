"""The ground floor: errors that name the field and value, strict field type checks, JSON files
read as data.

May import: nothing in the project."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
