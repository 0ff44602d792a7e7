"""Step-time models of one deployment: the roofline, the stage model and its per-GPU parameters,
attention kernels, MoE, the host and sampler terms, a real engine's time model (CUDA-graph plan,
split-KV), the frontend and scheduling overhead.

May import: sim.util, sim.core, sim.hardware, sim.models."""

from sim.compiled import activate as _activate

_activate(__name__, __path__)  # SERVESIM_COMPILED: the compiled hot modules (sim/compiled.py)
