"""`disagg`'s parameters and what it derives from the cluster: the link and KV bytes per token."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from sim.core.executor import InstanceInfo
from sim.memory.kv_transfer import (TransferLink, check_kv_bytes_per_token, link_preset,
                              read_send_recv)
from sim.util.errors import ConfigError

from policies.base import PolicyConfig


@dataclass(frozen=True)
class DisaggConfig(PolicyConfig):
    """Prefill/decode disaggregation over the cluster's instances."""

    num_prefill: int = 1  # the first num_prefill instances prefill, the rest decode
    prefill_policy: str = "vllm"  # the prefill pool's paged policy (vllm | vllm_v0 | sarathi)
    prefill_params: Mapping[str, Any] = field(default_factory=dict)  # its parameters
    decode_policy: str = "vllm"  # the decode pool's paged policy
    decode_params: Mapping[str, Any] = field(default_factory=dict)  # its parameters (router:
    # how a request's KV is placed on a decode instance)
    link: str = "rdma_400g"  # sim/memory/kv_transfer.py preset: nvlink, pcie4, pcie5, rdma_200g, ...
    send_recv_csv: str = ""  # a Vidur send_recv.csv: its measured curve instead of `link`
    send_recv_inter_node: bool = True  # the curve's inter-node rows (else intra-node)
    layerwise: bool = False  # stream KV layer by layer during the prefill (overlap)
    serialize_link: bool = True  # a prefill instance sends one transfer at a time (its NIC)
    kv_bytes_per_token: float = 0.0  # bytes of KV per prompt token sent; 0: from the model
    model: str = ""  # model whose KV is sent (fp16; "": what the instances report)

    def __post_init__(self) -> None:
        if self.num_prefill < 1:
            raise ConfigError("num_prefill", self.num_prefill, "must be >= 1 (a prefill pool "
                              "of at least one instance)")
        for name in ("prefill_params", "decode_params"):
            if not isinstance(getattr(self, name), Mapping):
                raise ConfigError(name, getattr(self, name), "must be a mapping of parameters")
        check_kv_bytes_per_token("kv_bytes_per_token", self.kv_bytes_per_token)
        if not self.send_recv_csv:
            link_preset(self.link, "link")

    def __hash__(self) -> int:  # the parameter mappings are dicts
        return hash((self.num_prefill, self.prefill_policy, self.decode_policy, self.link))

    def build_link(self) -> TransferLink:
        """The link KV crosses: the measured curve when given, else the preset."""
        if self.send_recv_csv:
            return read_send_recv(self.send_recv_csv, self.send_recv_inter_node)
        return link_preset(self.link, "link")


def check_instances(config: DisaggConfig, infos: Sequence[InstanceInfo]) -> None:
    """Refuse clusters disagg does not serve: a pool with no instance, backends other than the
    cost models (the real engine, HF static batches)."""
    if config.num_prefill >= len(infos):
        raise ConfigError("num_prefill", config.num_prefill,
                          f"leaves no decode instance of the cluster's {len(infos)} (each pool "
                          f"needs at least one)")
    for info in infos:  # a draft model only costs memory here: pools never speculate
        if "[" in info.name or "(hf_static)" in info.name:
            raise ConfigError("cluster.backend", info.name, "disagg runs on the cost-model "
                              "backend only (not the real engine or hf_static)")


def model_of(config: DisaggConfig, infos: Sequence[InstanceInfo]) -> tuple[float, int]:
    """(KV bytes per token, layers) of the served model: `model` when given, else what the
    instances report (`InstanceInfo.kv_bytes_per_token`, `num_layers`). An explicit
    `kv_bytes_per_token` wins; layers are then 1 if unknown."""
    if config.model:
        from sim.models.catalog import resolve_model

        m = resolve_model(config.model)  # ConfigError naming the model
        return (config.kv_bytes_per_token or float(m.kv_bytes_per_token(2.0))), m.num_layers
    sizes = {(info.kv_bytes_per_token, info.num_layers) for info in infos}
    if len(sizes) > 1:
        raise ConfigError("model", sorted(sizes), "pools serve one model with one KV dtype")
    per_token, layers = sizes.pop()
    if config.kv_bytes_per_token > 0:
        return config.kv_bytes_per_token, layers or 1
    if per_token <= 0:
        raise ConfigError("kv_bytes_per_token", config.kv_bytes_per_token, "the instances do not "
                          "report their KV size: set model or kv_bytes_per_token")
    return per_token, layers
