"""The request and the executor seam: `Request`, `Step` / `StepResult`, the `Executor` interface
both backends implement, and the arithmetic of multi-iteration steps.

May import: sim.util."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
