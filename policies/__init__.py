"""Scheduling policies, registered by name (see `policies.registry`)."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
