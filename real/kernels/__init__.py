"""Fused kernels for the real engine: Triton GPU kernels, their pure-torch references, dispatch.

`real.kernels.ops` is the entry point: each op runs its Triton kernel on CUDA tensors when triton
imports, else the torch reference (`real.kernels.reference`, also the engine's CPU path).
Importing this package, `ops`, `reference` or `schedule` imports neither triton nor CUDA; only
the kernel modules (`norm`, `rope_cache`, `activation`, `attention_*`) import triton.
"""
