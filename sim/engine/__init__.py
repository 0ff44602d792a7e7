"""The SimPy engine: arrivals, one serve loop per instance, the policy interface, admission, client
timeouts, the context limit, and `run_simulation`.

May import: sim.util, sim.core, sim.records, sim.metrics, sim.cost."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
