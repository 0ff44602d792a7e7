"""Print the built-in models as the markdown table of docs/models.md.

    python scripts/models_table.py

Columns: parameters (all, and per token for MoE), layers, attention heads / KV heads x head_dim,
the context (max_position_embeddings, what a run enforces), fp16 KV bytes per token, and the
smallest tensor-parallel group of H100-80GB (up to 8) with fp16 weights, else fp8 weights, that
leaves room for KV (with the tokens it caches), as `sim.cost.cost_model.DeploymentSpec` sizes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.cost.cost_model import DeploymentSpec  # noqa: E402
from sim.hardware.gpus import get_gpu  # noqa: E402
from sim.models.builtin_models import ALIASES  # noqa: E402
from sim.models.catalog import MODELS, ModelSpec  # noqa: E402
from sim.util.errors import ConfigError  # noqa: E402

HEADER = ("| name | also | params (B) | layers | heads / KV x dim | context (tokens) "
          "| KV / token fp16 (KiB) | H100-80GB: TP, KV tokens |")


def smallest_fit(model: ModelSpec) -> str:
    """'TP=4, 366,000' for the smallest TP (1, 2, 4, 8) of fp16 weights that fits, else of fp8
    weights ('TP=8 fp8, ...'), '-' when none does."""
    for dtype in ("fp16", "fp8"):
        for tp in (1, 2, 4, 8):
            try:
                dep = DeploymentSpec(model=model, gpu=get_gpu("H100-80GB"), tensor_parallel=tp,
                                     weight_dtype=dtype)
            except ConfigError:
                continue
            return f"TP={tp}{' fp8' if dtype == 'fp8' else ''}, {dep.kv_capacity_tokens:,}"
    return "-"


def row(model: ModelSpec) -> str:
    """One markdown row for `model`."""
    also = ", ".join(f"`{a}`" for a, n in ALIASES.items() if n == model.name and "/" in a)
    params = f"{model.num_params / 1e9:.2f}"
    if model.moe is not None:
        params += f" ({model.num_active_params / 1e9:.2f} active)"
    heads = f"{model.num_attention_heads} / {model.num_kv_heads} x {model.head_dim}"
    if model.mla is not None:
        heads = f"{model.num_attention_heads} MLA (latent {model.mla.kv_elements_per_token})"
    context = f"{model.max_position_embeddings:,}"
    if model.exact_up_to is not None:
        context += f" (window {model.sliding_window:,} on {model.num_sliding_layers} layers)"
    kv = f"{model.kv_bytes_per_token(2) / 1024:g}"
    return (f"| {model.name} | {also} | {params} | {model.num_layers} | {heads} | {context} "
            f"| {kv} | {smallest_fit(model)} |")


def main() -> None:
    print(HEADER)
    print("|---" * 8 + "|")
    for model in MODELS.values():
        print(row(model))


if __name__ == "__main__":
    main()
