"""Seeded random weights that are the same bits on every device.

torch's generators differ by device (CPU Mersenne Twister, CUDA Philox), so `normal_` with one
seed gives a CPU model and a CUDA model with different weights and different logits. Here each
element is a function of (key, flat index) alone: splitmix64 of the index, computed with int64
tensor arithmetic (wrapping multiply, masked shifts for the logical right shift) that is exact on
any device, then mapped to a uniform value in (-a, a) with a = std * sqrt(3) (the standard
deviation asked for). The mapping is exact in float32 up to one final rounding, which IEEE
hardware does alike, so a CPU and a CUDA model hold identical weights and an fp32 forward pass
can be compared element for element. `hash_uniform_numpy` is the same function in numpy, the
reference the tests hold the torch version to.
"""

from __future__ import annotations

import math

import numpy as np
import torch

CHUNK = 1 << 24  # elements hashed per pass (bounds the int64 temporaries: 128 MiB each)
BITS = 23  # uniform resolution: (2u + 1) / 2**24 is exact in float32 for u < 2**23
_C1, _C2, _C3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64


def _signed(c: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's >> on int64 is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    x = x + _signed(_C1)
    x = (x ^ _shr(x, 30)) * _signed(_C2)
    x = (x ^ _shr(x, 27)) * _signed(_C3)
    return x ^ _shr(x, 31)


def _unit(bits: torch.Tensor) -> torch.Tensor:
    """Top BITS bits -> uniform float32 in (-1, 1), exactly (2u + 1 - 2**BITS) / 2**BITS."""
    u = _shr(bits, 64 - BITS).to(torch.float32)
    return (2.0 * u + (1.0 - 2.0 ** BITS)) * (2.0 ** -BITS)


@torch.no_grad()
def hash_uniform_(tensor: torch.Tensor, key: int, std: float) -> torch.Tensor:
    """Fill `tensor` in place with the hashed uniform values of standard deviation `std`."""
    flat = tensor.view(-1)
    scale = std * math.sqrt(3.0)
    mixed_key = _signed(int(np.uint64(key & 0xFFFFFFFFFFFFFFFF)))
    for start in range(0, flat.numel(), CHUNK):
        stop = min(start + CHUNK, flat.numel())
        idx = torch.arange(start, stop, dtype=torch.int64, device=tensor.device)
        values = _unit(_splitmix64(idx ^ mixed_key)) * scale
        flat[start:stop] = values.to(tensor.dtype)
    return tensor


def hash_uniform_numpy(num: int, key: int, std: float) -> np.ndarray:
    """The float32 values `hash_uniform_` writes into a float32 tensor of `num` elements."""
    with np.errstate(over="ignore"):
        x = np.arange(num, dtype=np.uint64) ^ np.uint64(key & 0xFFFFFFFFFFFFFFFF)
        x = x + np.uint64(_C1)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_C2)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_C3)
        x = x ^ (x >> np.uint64(31))
    u = (x >> np.uint64(64 - BITS)).astype(np.float32)
    unit = (np.float32(2.0) * u + np.float32(1.0 - 2.0 ** BITS)) * np.float32(2.0 ** -BITS)
    return unit * np.float32(std * math.sqrt(3.0))
