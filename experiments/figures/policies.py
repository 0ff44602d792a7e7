"""docs/policies.md, "Published directions, reproduced": the figures of the scenarios in
experiments/figures/policy_scenarios.py, simulated here (no config: the page runs its own
simulations, NUM_REQUESTS requests per run, seed 0). Prints every number it plots and writes
FIGURES/policies_*.png.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt  # noqa: E402

from experiments.figures.page import FigurePage  # noqa: E402
from experiments.figures.policy_scenarios import (  # noqa: E402
    CHUNKED, DYNAMIC, PAGED, PAGED_80GB, QUANT_GPU, QUANT_MODEL, QUANT_SEQ, Scenario,
    quantized_run)
from experiments.report.plot import save  # noqa: E402

NUM_REQUESTS = 1000  # requests per simulated run


def sweep(scn: Scenario, key: str, n: int) -> dict[str, list[float]]:
    """`key` of the run summary at every rate of the scenario, per policy label."""
    out = {label: [scn.run(label, rate, n)[key] for rate in scn.rates] for label in scn.policies}
    for label, values in out.items():
        print(f"  {label:24s} {key}: " + ", ".join(f"{r:g}:{v:.4g}"
                                                   for r, v in zip(scn.rates, values)))
    return out


def capacities(scn: Scenario, n: int) -> dict[str, float]:
    """Each policy's capacity (req/s) under the scenario's SLO, printed."""
    caps = {label: scn.capacity(label, n).capacity_rps for label in scn.policies}
    print(f"  capacity under {scn.slo.bounds()}: " +
          ", ".join(f"{k} {v:.3g} req/s" for k, v in caps.items()))
    return caps


def curve_panel(ax: plt.Axes, scn: Scenario, values: dict[str, list[float]],
                caps: dict[str, float] | None, ylabel: str, bound: float | None,
                log: bool = False) -> None:
    """One line per policy against the rate; capacities dotted, the SLO bound dashed."""
    for label, ys in values.items():
        line, = ax.plot(scn.rates, ys, marker="o", label=label)
        if caps:
            ax.axvline(caps[label], color=line.get_color(), ls=":", lw=1)
    if bound is not None:
        ax.axhline(bound, color="grey", ls="--", lw=1, label="SLO")
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel(ylabel)
    ax.set_title(scn.title, fontsize=8)
    ax.legend(fontsize=7)


def draw_paged(out: Path, n: int) -> list[Path]:
    """vLLM vs Orca (Max) on A100-40GB and A100-80GB: normalized latency and capacity."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, scn in zip(axes, (PAGED, PAGED_80GB)):
        print(scn.title)
        key = "mean_normalized_latency_s"
        curve_panel(ax, scn, sweep(scn, key, n), capacities(scn, n),
                    "mean normalized latency (s/token)", scn.slo.normalized_latency_mean_s, True)
    return save_png(fig, out, "policies_vllm_vs_orca")


def draw_chunked(out: Path, n: int) -> list[Path]:
    """Sarathi-Serve vs vLLM on ~2k-token prompts: P99 TBT, P90 TTFT and capacity."""
    print(CHUNKED.title)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    caps = capacities(CHUNKED, n)
    curve_panel(axes[0], CHUNKED, sweep(CHUNKED, "p99_itl_s", n), caps, "P99 TBT (s)",
                CHUNKED.slo.tbt_p99_s, True)
    curve_panel(axes[1], CHUNKED, sweep(CHUNKED, "p90_ttft_s", n), caps, "P90 TTFT (s)",
                CHUNKED.slo.ttft_p90_s, True)
    return save_png(fig, out, "policies_sarathi_vs_vllm")


def draw_dynamic(out: Path, n: int) -> list[Path]:
    """Dynamic vs static vs greedy batching: mean E2E latency against the rate."""
    print(DYNAMIC.title)
    fig, ax = plt.subplots(figsize=(6, 4))
    curve_panel(ax, DYNAMIC, sweep(DYNAMIC, "mean_e2e_s", n), None, "mean E2E latency (s)",
                None, True)
    ax.set_xscale("log")
    return save_png(fig, out, "policies_dynamic_vs_vanilla")


def draw_quantized(out: Path) -> list[Path]:
    """Quantized vanilla: the batch size run and throughput against the configured one."""
    print(f"vanilla on {QUANT_GPU}, {QUANT_MODEL}, requests of {QUANT_SEQ} tokens")
    sizes = list(range(8, 65, 4))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for dtype in ("fp16", "int8", "int4"):
        runs = [quantized_run(dtype, b) for b in sizes]
        fits = runs[0]["kv_capacity_tokens"] // sum(QUANT_SEQ)
        print(f"  {dtype}: KV {runs[0]['kv_capacity_tokens']} tokens, largest batch {fits}; "
              + ", ".join(f"b{b}:{r['mean_batch_size']:.1f}/{r['output_throughput']:.0f}tok/s"
                          for b, r in zip(sizes, runs)))
        axes[0].plot(sizes, [r["mean_batch_size"] for r in runs], marker="o", label=dtype)
        axes[1].plot(sizes, [r["output_throughput"] for r in runs], marker="o",
                     label=f"{dtype} (fits {fits})")
    axes[0].set_ylabel("batch size run (mean over iterations)")
    axes[1].set_ylabel("output tokens / s")
    for ax in axes:
        ax.set_xlabel("configured batch_size")
        ax.legend(fontsize=7)
    fig.suptitle(f"Quantized vanilla (VSQ): {QUANT_MODEL} on {QUANT_GPU}, "
                 f"{QUANT_SEQ[0]}+{QUANT_SEQ[1]}-token requests, OOM batches split", fontsize=9)
    return save_png(fig, out, "policies_quantized_vanilla")


def save_png(fig: plt.Figure, out: Path, stem: str) -> list[Path]:
    """OUT/<stem>.png at 110 dpi, laid out tight."""
    fig.tight_layout()
    return save(fig, out, stem, ["png"], dpi=110)


def draw(results: list[Path], figures: Path, num_requests: int = NUM_REQUESTS) -> list[Path]:
    """The four figures, each from its own simulations (`results` is unused: no configs)."""
    return (draw_paged(figures, num_requests) + draw_chunked(figures, num_requests)
            + draw_dynamic(figures, num_requests) + draw_quantized(figures))


PAGE = FigurePage("policies", "docs/policies.md", (), draw,
                  "published directions: vLLM vs Orca, Sarathi vs vLLM, dynamic, quantized "
                  "(simulated here, no config)")
