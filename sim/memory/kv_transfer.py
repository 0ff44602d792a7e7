"""KV-cache transfer links between a prefill and a decode instance (disaggregated serving).

A transfer of B bytes over a `Link` takes `latency_s + B / bandwidth_bytes_per_s` seconds; a
`MeasuredLink` interpolates a measured send/recv curve instead (Vidur's `send_recv.csv`:
`size` in bytes, `time_stats.send_recv.median` in ms), linearly between measured sizes and, past
the largest, at the bandwidth a least-squares line fits to the largest quarter of the sizes (KV
of one long prompt, hundreds of MB, is far past the 64 MiB such profiles stop at).

With layer-wise streaming (DistServe, Splitwise, vLLM's NIXL connector) each layer's KV is sent
as soon as the layer's prefill computed it, so the transfer overlaps the prefill: only
max(time of one layer's share, whole transfer - overlap) is exposed after the prefill ends.

Presets (`LINKS`) are one direction of one link at its nominal peak; an instance sends over one
link (tensor-parallel shards are not sent in parallel here). Sources are given per preset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from sim.util.errors import ConfigError

GB = 1e9  # bytes per (decimal) gigabyte
GBIT = 1e9 / 8  # bytes per gigabit
# Physical bounds on a transfer's inputs; past them a value is a typo or a unit mistake, and
# transfer times reach 1e20 s or more, where adding a step's milliseconds no longer moves the clock.
MAX_LINK_LATENCY_S = 1.0  # seconds: links here take 1-20 us, a cross-continent round trip 0.1 s
MIN_LINK_BANDWIDTH = 1e3  # bytes/s: 1 kB/s, slower than a 1990s dial-up modem
MAX_MEASURED_S = 60.0  # seconds per measured message: profiles stop at 64 MiB (0.5 s at 1 Gb/s)
MAX_KV_BYTES_PER_TOKEN = 2.0**30  # bytes: 1 GiB per token, 100x GPT-3 175B's fp32 KV (9.4 MB)


class TransferLink(Protocol):
    """Anything that gives the seconds a transfer of some bytes takes."""

    name: str

    def seconds(self, num_bytes: float) -> float: ...


@dataclass(frozen=True)
class Link:
    """A link modelled by its latency and bandwidth."""

    name: str  # preset or user label
    latency_s: float  # seconds before the first byte arrives
    bandwidth_bytes_per_s: float  # bytes per second, one direction

    def __post_init__(self) -> None:
        if not (isinstance(self.latency_s, (int, float))
                and 0 <= self.latency_s <= MAX_LINK_LATENCY_S):
            raise ConfigError("latency_s", self.latency_s, f"must be a number of seconds in "
                              f"[0, {MAX_LINK_LATENCY_S:g}] (KV links take 1-20 us; a "
                              f"cross-continent round trip 0.1 s)")
        if not (isinstance(self.bandwidth_bytes_per_s, (int, float))
                and MIN_LINK_BANDWIDTH <= self.bandwidth_bytes_per_s):
            raise ConfigError("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s,
                              f"must be >= {MIN_LINK_BANDWIDTH:g} bytes per second (slower than "
                              f"a dial-up modem; math.inf: a free link)")

    def seconds(self, num_bytes: float) -> float:
        """Seconds to move `num_bytes` bytes: latency + bytes / bandwidth."""
        return self.latency_s + num_bytes / self.bandwidth_bytes_per_s


# name -> (latency seconds, bandwidth bytes/s, source). Nominal one-direction peaks.
LINKS: dict[str, Link] = {
    # NVLink 4 (H100 SXM): 900 GB/s bidirectional = 450 GB/s each way (NVIDIA H100 datasheet);
    # 8 us: the smallest intra-node send/recv in Vidur's A100 profile (2 KiB in 0.008 ms)
    "nvlink": Link("nvlink", 8e-6, 450 * GB),
    # PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s each way (PCI-SIG 4.0 spec);
    # 10 us: a host-staged copy's launch + DMA setup (order of cudaMemcpy latency)
    "pcie4": Link("pcie4", 10e-6, 31.5 * GB),
    # PCIe 5.0 x16: 32 GT/s x 16 lanes = 63 GB/s each way (PCI-SIG 5.0 spec)
    "pcie5": Link("pcie5", 10e-6, 63 * GB),
    # GPU <-> pinned host memory over PCIe 3.0 x16 (V100 hosts): ~12 GB/s effective of 15.75
    "pcie3_host": Link("pcie3_host", 10e-6, 12 * GB),
    # GPU <-> pinned host memory over PCIe 4.0 x16 as copies reach it: ~25 GB/s effective of
    # the 31.5 nominal (CUDA bandwidthTest, pinned, on A100 hosts: 24-26 GB/s); KV tiers' default
    "pcie4_host": Link("pcie4_host", 10e-6, 25 * GB),
    # the same over PCIe 5.0 x16 (H100 / H200 hosts): ~50 GB/s effective of 63 nominal
    "pcie5_host": Link("pcie5_host", 10e-6, 50 * GB),
    # InfiniBand HDR 200 Gb/s (ConnectX-6; Splitwise's A100 cluster); 10 us: GPUDirect RDMA
    # verbs post + completion for one message (~1-2 us wire, the rest host-side)
    "rdma_200g": Link("rdma_200g", 10e-6, 200 * GBIT),
    # InfiniBand NDR 400 Gb/s, one ConnectX-7 per GPU in a DGX H100 (NVIDIA DGX H100 guide)
    "rdma_400g": Link("rdma_400g", 10e-6, 400 * GBIT),
    # 100 Gb/s Ethernet (IEEE 802.3ba/bj; RoCE or TCP): 12.5 GB/s; 20 us: TCP/RoCE stack
    "ethernet_100g": Link("ethernet_100g", 20e-6, 100 * GBIT),
    # an infinitely fast link: disaggregation with free transfers (tests, upper bounds)
    "free": Link("free", 0.0, math.inf),
}
LINK_ALIASES = {"infiniband_200g": "rdma_200g", "infiniband_400g": "rdma_400g"}


def check_kv_bytes_per_token(field: str, value: float) -> None:
    """ConfigError naming `field` unless 0 <= value <= MAX_KV_BYTES_PER_TOKEN bytes (0: take
    the model's)."""
    if isinstance(value, bool) or not (isinstance(value, (int, float))
                                       and 0 <= value <= MAX_KV_BYTES_PER_TOKEN):
        raise ConfigError(field, value, (
            f"must be a number of bytes in [0, {MAX_KV_BYTES_PER_TOKEN:.0f}] (0: from the model; "
            f"the largest models hold a few MB of KV per token, GPT-3 175B 9.4 MB in fp32, and "
            f"an 80 GB GPU would hold 80 tokens of 1 GiB)"))


def link_preset(name: str, field: str = "link") -> Link:
    """The preset named `name` (or an alias); ConfigError naming `field` otherwise."""
    key = LINK_ALIASES.get(name, name)
    if not isinstance(name, str) or key not in LINKS:
        known = ", ".join(sorted([*LINKS, *LINK_ALIASES]))
        raise ConfigError(field, name, f"unknown link; known: {known}")
    return LINKS[key]


@dataclass(frozen=True)
class MeasuredLink:
    """A measured send/recv curve: seconds by message size, interpolated."""

    name: str  # label (the file read)
    sizes: tuple[float, ...]  # bytes, strictly increasing
    times_s: tuple[float, ...]  # seconds at each size
    tail_bytes_per_s: float  # bandwidth past the largest size (fitted), bytes per second

    def __post_init__(self) -> None:
        s = np.asarray(self.sizes, dtype=np.float64)
        t = np.asarray(self.times_s, dtype=np.float64)
        if len(s) < 2 or len(s) != len(t) or not np.all(np.diff(s) > 0):
            raise ConfigError("send_recv_csv", self.name, "needs >= 2 distinct sizes, one "
                              "time each")
        if not (np.all(np.isfinite(s)) and s[0] >= 0):
            raise ConfigError("send_recv_csv", self.name, f"sizes must be finite numbers of "
                              f"bytes >= 0; got {float(s[0])!r}..{float(s[-1])!r}")
        bad = ~((t >= 0) & (t <= MAX_MEASURED_S))
        if bad.any():
            raise ConfigError("send_recv_csv", self.name, f"the time at size {float(s[bad][0])!r}"
                              f" B is {float(t[bad][0])!r} s; each must be in [0, "
                              f"{MAX_MEASURED_S:g}] s "
                              f"(profiled messages stop at 64 MiB: 0.5 s even at 1 Gb/s)")
        if not MIN_LINK_BANDWIDTH <= self.tail_bytes_per_s < math.inf:
            raise ConfigError("send_recv_csv", self.name, f"its largest sizes fit a bandwidth "
                              f"of {self.tail_bytes_per_s!r} bytes/s; must be finite and >= "
                              f"{MIN_LINK_BANDWIDTH:g} (slower than a dial-up modem)")

    def seconds(self, num_bytes: float) -> float:
        """Interpolated seconds for `num_bytes` (below the smallest size: its time)."""
        if num_bytes <= self.sizes[-1]:
            return float(np.interp(num_bytes, self.sizes, self.times_s))
        return self.times_s[-1] + (num_bytes - self.sizes[-1]) / self.tail_bytes_per_s


def measured_link(sizes: np.ndarray, times_s: np.ndarray, name: str) -> MeasuredLink:
    """A MeasuredLink from (size, seconds) points: the median per size, a line fitted to the
    largest quarter of the sizes (at least two) for the bandwidth past them."""
    sizes, times_s = np.asarray(sizes, dtype=np.float64), np.asarray(times_s, dtype=np.float64)
    uniq = np.unique(sizes)
    med = np.array([np.median(times_s[sizes == u]) for u in uniq])
    top = max(2, len(uniq) // 4)
    slope = np.polyfit(uniq[-top:], med[-top:], 1)[0] if len(uniq) >= 2 else 0.0  # s / byte
    tail = 1.0 / slope if slope > 0 else 0.0
    return MeasuredLink(name, tuple(uniq.tolist()), tuple(med.tolist()), tail)


def read_send_recv(path: str | Path, inter_node: bool = True) -> MeasuredLink:
    """Vidur's send_recv.csv as a MeasuredLink: the inter-node rows (devices_per_node = 1: the
    two GPUs on different hosts, the link a disaggregated cluster crosses) or the intra-node
    ones (devices_per_node = num_workers), read with the profile readers (sim/measured/profile_csv.py)."""
    from sim.measured.profile_csv import (MS, integer_column, numeric_column, read_profile_csv,
                                 require_columns, stat_column)

    path = Path(path)
    if not path.is_file():
        raise ConfigError("send_recv_csv", str(path), "no such file")
    frame = read_profile_csv(path)
    col = stat_column("send_recv")
    require_columns(frame, ["size", col], path, "send_recv")
    sizes = numeric_column(frame, "size", path)
    seconds = numeric_column(frame, col, path) * MS
    if "devices_per_node" in frame.columns and "num_workers" in frame.columns:
        per_node = integer_column(frame, "devices_per_node", path)
        workers = integer_column(frame, "num_workers", path)
        keep = (per_node == 1) if inter_node else (per_node == workers)
        sizes, seconds = sizes[keep], seconds[keep]
    where = "inter" if inter_node else "intra"
    return measured_link(np.asarray(sizes), np.asarray(seconds), f"{path.name} ({where}-node)")


def exposed_seconds(link: TransferLink, num_bytes: float, layerwise: bool = False,
                    num_layers: int = 1, overlap_s: float = 0.0) -> float:
    """Seconds a transfer of `num_bytes` adds after the prefill that produced them ended. Without
    layer-wise streaming: the whole transfer. With it, each of `num_layers` layers' share is
    sent while later layers compute for `overlap_s` seconds: max(one layer's share, the whole
    transfer - overlap_s)."""
    whole = link.seconds(num_bytes)
    if not layerwise:
        return whole
    return max(link.seconds(num_bytes / num_layers), whole - overlap_s)
