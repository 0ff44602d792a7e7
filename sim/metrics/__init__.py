"""Summaries of a finished run: vLLM-bench-named metrics, SLOs and goodput, per-class metrics, the
steady-state window, host wall-clock timings.

May import: sim.util, sim.core, sim.records."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
