"""docs/speculative.md: speculative decoding (experiments/configs/speculative.yaml).

Reads RESULTS/speculative/summary.csv and config.json (each label's k, acceptance rate and draft
model), then writes to FIGURES:
- speculative_tokens_per_step.png: tokens per verify against k, measured (markers) and the
  closed form (1 - alpha^(k+1)) / (1 - alpha) (lines);
- speculative_vs_k.png: mean TPOT (lowest and highest request rate) and output throughput (two
  highest rates) against k, one line per alpha (k = 0 is plain decoding, no draft);
- speculative_vs_rate.png: plain / speculative mean TPOT and speculative / plain throughput
  against the request rate at a fixed k (below 1: speculation is slower);
and RESULTS/speculative/speculative_table.md (also printed): every run's change against plain
decoding at its rate, and the cost model's break-even acceptance rate per batch size, context
and k.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.figures.page import FigurePage  # noqa: E402
from experiments.report.plot import save  # noqa: E402
from policies.speculative import expected_tokens_per_step  # noqa: E402

PLAIN = "plain"  # the label of the run without speculation
K = 4  # draft tokens per verify of the against-rate figure


def load(results: Path) -> pd.DataFrame:
    """summary.csv with each label's k, alpha and draft model (from config.json)."""
    summary = pd.read_csv(results / "summary.csv")
    config = json.loads((results / "config.json").read_text(encoding="utf-8"))
    rows = []
    for entry in config["policies"]:
        params, cluster = entry.get("params", {}), entry.get("cluster", {})
        rows.append({"label": entry["label"],
                     "k": int(params.get("num_speculative_tokens", 0)),
                     "alpha": float(params.get("acceptance_rate", np.nan)),
                     "draft": cluster.get("draft_model") or "none"})
    return summary.merge(pd.DataFrame(rows), on="label").sort_values(["draft", "alpha", "k"])


def series(df: pd.DataFrame, rate: float, draft: str, alpha: float, col: str,
           scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(k, metric) at `rate` for one draft and alpha, plain decoding as k = 0."""
    at = df[df["rate"] == rate]
    runs = at[(at["draft"] == draft) & (at["alpha"] == alpha)]
    both = pd.concat([at[at["label"] == PLAIN], runs]).sort_values("k")
    return both["k"].to_numpy(), both[col].to_numpy() * scale


def curves(df: pd.DataFrame) -> list[tuple[str, float, str]]:
    """(draft, alpha, legend) of every speculative line, the main draft first."""
    spec = df[df["k"] > 0][["draft", "alpha"]].drop_duplicates()
    counts = spec["draft"].value_counts()
    main = counts.index[0] if len(counts) else ""
    out = [(d, a, f"alpha={a:g}" if d == main else f"alpha={a:g}, draft {d}")
           for d, a in spec.itertuples(index=False)]
    return sorted(out, key=lambda c: (c[0] != main, c[1]))


def plot_tokens_per_step(df: pd.DataFrame, out: Path) -> Path:
    rate = df["rate"].min()
    fig, ax = plt.subplots(figsize=(5, 3.6))
    ks = np.arange(0, df["k"].max() + 1)
    for draft, alpha, name in curves(df):
        if "," in name:  # acceptance does not depend on the draft's size: one line per alpha
            continue
        k, measured = series(df, rate, draft, alpha, "spec_tokens_per_step")
        line = ax.plot(k[k > 0], measured[k > 0], "o", ms=4, label=name)[0]
        ax.plot(ks, [expected_tokens_per_step(alpha, int(j)) for j in ks], "-", lw=1,
                color=line.get_color(), alpha=0.6)
    ax.set_xlabel("draft tokens per verify k")
    ax.set_ylabel("tokens per verify (accepted + 1)")
    ax.set_title(f"measured (markers) vs closed form (lines), {rate:g} req/s", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out, "speculative_tokens_per_step", ["png"])[0]


def plot_vs_k(df: pd.DataFrame, out: Path) -> Path:
    rates = sorted(df["rate"].unique())
    low, mid, high = rates[0], rates[max(len(rates) - 2, 0)], rates[-1]
    panels = [(low, "mean_tpot_s", "mean TPOT (ms)", 1e3),
              (high, "mean_tpot_s", "mean TPOT (ms)", 1e3),
              (mid, "output_throughput", "output throughput (tok/s)", 1.0),
              (high, "output_throughput", "output throughput (tok/s)", 1.0)]
    fig, axes = plt.subplots(2, 2, figsize=(9, 6.4))
    for ax, (rate, col, label, scale) in zip(axes.flat, panels):
        for draft, alpha, name in curves(df):
            k, y = series(df, rate, draft, alpha, col, scale)
            ax.plot(k, y, marker="o", ms=3, ls="--" if name.count(",") else "-", label=name)
        plain = df[(df["label"] == PLAIN) & (df["rate"] == rate)][col].iloc[0] * scale
        ax.axhline(plain, color="k", lw=0.8, ls=":", label="plain decoding")
        ax.set_title(f"{rate:g} req/s", fontsize=9)
        ax.set_xlabel("draft tokens per verify k")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out, "speculative_vs_k", ["png"])[0]


def plot_vs_rate(df: pd.DataFrame, out: Path, k: int) -> Path:
    plain = df[df["label"] == PLAIN].set_index("rate")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for draft, alpha, name in curves(df):
        runs = df[(df["draft"] == draft) & (df["alpha"] == alpha) & (df["k"] == k)]
        if runs.empty:
            continue
        runs = runs.set_index("rate").sort_index()
        style = "--" if name.count(",") else "-"
        axes[0].plot(runs.index, plain.loc[runs.index, "mean_tpot_s"] / runs["mean_tpot_s"],
                     marker="o", ms=3, ls=style, label=name)
        axes[1].plot(runs.index, runs["output_throughput"]
                     / plain.loc[runs.index, "output_throughput"], marker="o", ms=3, ls=style,
                     label=name)
    for ax, label in zip(axes, ("TPOT speed-up (plain / speculative)",
                                "throughput ratio (speculative / plain)")):
        ax.axhline(1.0, color="k", lw=0.8, ls=":")
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(label)
        ax.set_title(f"k = {k}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return save(fig, out, "speculative_vs_rate", ["png"])[0]


def table(df: pd.DataFrame) -> str:
    """Markdown: each run against plain decoding at its rate."""
    plain = df[df["label"] == PLAIN].set_index("rate")
    lines = ["| label | rate | tokens/verify | mean TPOT ms | TPOT vs plain | tok/s | "
             "tok/s vs plain | mean batch |", "|---|---|---|---|---|---|---|---|"]
    for row in df.sort_values(["rate", "draft", "alpha", "k"]).itertuples(index=False):
        base = plain.loc[row.rate]
        lines.append(
            f"| {row.label} | {row.rate:g} | {row.spec_tokens_per_step:.2f} | "
            f"{row.mean_tpot_s * 1e3:.1f} | {row.mean_tpot_s / base.mean_tpot_s - 1:+.0%} | "
            f"{row.output_throughput:.0f} | "
            f"{row.output_throughput / base.output_throughput - 1:+.0%} | "
            f"{row.mean_batch_size:.1f} |")
    return "\n".join(lines)


def breakeven_alpha(cost_ratio: float, k: int) -> float:
    """The acceptance rate whose tokens per verify equal `cost_ratio` (nan: never)."""
    if cost_ratio >= k + 1:
        return float("nan")
    lo, hi = 0.0, 1.0
    for _ in range(50):  # tokens per verify rise with alpha
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens_per_step(mid, k) < cost_ratio else (lo, mid)
    return lo


def breakeven_table(cluster: dict, draft: str, contexts: Sequence[int] = (200, 1300),
                    batches: Sequence[int] = (1, 16, 64, 256),
                    ks: Sequence[int] = (1, 2, 4, 8)) -> str:
    """Markdown: per batch of decodes (all at one context), the verify step's cost over a plain
    decode step, and the acceptance rate above which speculation emits tokens faster."""
    from sim.cluster.spec import ClusterSpec, build_executors
    from sim.core.executor import Step

    base = {k: v for k, v in cluster.items() if k != "draft_model"}
    plain = build_executors(ClusterSpec(**base))[0]
    spec = build_executors(ClusterSpec(**base, draft_model=draft))[0]
    lines = ["| context | batch | plain step ms | " + " | ".join(
        f"k={k}: cost x / break-even alpha" for k in ks) + " |", "|---" * (3 + len(ks)) + "|"]
    for c in contexts:
        for b in batches:
            ids, ctx, yes = tuple(range(b)), (c,) * b, (True,) * b
            t0 = plain.execute(Step(0, ids, (1,) * b, ctx, yes)).duration_s
            cells = []
            for k in ks:
                t = spec.execute(Step(0, ids, (k + 1,) * b, ctx, yes, num_draft_tokens=k,
                                      num_verify_seqs=b)).duration_s
                cells.append(f"{t / t0:.2f} / {breakeven_alpha(t / t0, k):.2f}")
            lines.append(f"| {c} | {b} | {t0 * 1e3:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw(results: list[Path], figures: Path, k: int = K) -> list[Path]:
    """The three figures and the table of RESULTS/speculative (FileNotFoundError without its
    summary.csv / config.json, ValueError without a run labelled PLAIN)."""
    results_dir = results[0]
    for name in ("summary.csv", "config.json"):
        if not (results_dir / name).is_file():
            raise FileNotFoundError(f"no {name} in {results_dir} (run a sweep into it first)")
    df = load(results_dir)
    if PLAIN not in set(df["label"]):
        raise ValueError(f"{results_dir} has no run labelled {PLAIN!r}")
    written = [plot_tokens_per_step(df, figures), plot_vs_k(df, figures),
               plot_vs_rate(df, figures, k)]
    config = json.loads((results_dir / "config.json").read_text(encoding="utf-8"))
    main_draft = curves(df)[0][0]
    text = table(df) + "\n\n" + breakeven_table(config["cluster"], main_draft)
    (results_dir / "speculative_table.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    return written + [results_dir / "speculative_table.md"]


PAGE = FigurePage("speculative", "docs/speculative.md", ("experiments/configs/speculative.yaml",),
                  draw, "speculative decoding: tokens per verify, TPOT and throughput vs k, rate")
