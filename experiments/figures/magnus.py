"""docs/magnus.md: Magnus against its baselines (experiments/configs/magnus.yaml).

From RESULTS/magnus (summary.csv and each run's steps.parquet):
- request throughput, mean and p99 latency, and valid / total generated-token throughput
  against the request rate, one line per policy label (FIGURES/magnus_*.png);
- RESULTS/magnus/magnus_ratios.md (also printed): each of TARGETS' change against the first of
  BASELINES at each rate, and the range over rates against every baseline, next to the paper's.
Valid tokens are the outputs of finished requests; total generated tokens count every sampled
slot of every iteration, wasted slots of finished requests in a static batch and iterations
lost to OOM included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from experiments.figures.page import FigurePage  # noqa: E402
from experiments.report.plot import save  # noqa: E402

# Magnus vs the baselines, arXiv 2406.04785 (valid tokens: the answers'; total: every token
# generated, over-generation of finished rows included)
PAPER = {"request_throughput": "+66% to +234%", "mean_e2e_s": "-60.3% to -89.7%",
         "p99_e2e_s": "-53.2% to -91.7%", "valid_token_throughput": "+70% to +240%",
         "total_token_generated_throughput": "+115% to +489%"}
METRICS: tuple[tuple[str, str], ...] = (  # (summary column, axis label)
    ("request_throughput", "request throughput (req/s)"),
    ("mean_e2e_s", "mean latency (s)"),
    ("p99_e2e_s", "p99 latency (s)"),
)
TARGETS = ("Magnus", "Magnus-oracle")  # labels whose changes are tabulated
BASELINES = ("VS", "VSQ", "CCB", "CCB-HF")  # labels compared against (the first per rate)
PRINTED = ["label", "rate", "request_throughput", "mean_e2e_s", "p99_e2e_s",
           "valid_token_throughput", "total_token_generated_throughput", "num_oom_events",
           "completed"]  # columns of the printed per-rate table


def generated_tokens(run_dir: Path) -> int:
    """Tokens sampled by every slot of every iteration of a run (its steps.parquet)."""
    steps = pd.read_parquet(run_dir / "steps.parquet", columns=["num_seqs", "num_iterations"])
    return int((steps["num_seqs"] * steps["num_iterations"]).sum())


def load(results: Path) -> pd.DataFrame:
    """summary.csv plus valid / total generated-token throughput per run, seed means."""
    frame = pd.read_csv(results / "summary.csv")
    totals = [generated_tokens(results / "runs" / run) for run in frame["run"]]
    frame["valid_token_throughput"] = frame["output_throughput"]
    frame["total_token_generated_throughput"] = pd.Series(totals) / frame["duration_s"]
    return frame.groupby(["label", "rate"], sort=False).mean(numeric_only=True).reset_index()


def plot(frame: pd.DataFrame, labels: Sequence[str], figures: Path) -> list[Path]:
    """One figure per metric against the request rate; returns the files written."""
    written = []
    panels = [(m, t, None) for m, t in METRICS] + [
        ("valid_token_throughput", "tokens/s", "total_token_generated_throughput")]
    for metric, title, dashed in panels:
        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        for i, label in enumerate(labels):
            rows = frame[frame["label"] == label].sort_values("rate")
            ax.plot(rows["rate"], rows[metric], "o-", color=f"C{i}", label=label)
            if dashed:
                ax.plot(rows["rate"], rows[dashed], "x--", color=f"C{i}", alpha=0.6)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel(title)
        if dashed:
            ax.set_title("generated tokens/s: valid (solid), total incl. waste (dashed)",
                         fontsize=9)
        if metric != "request_throughput" and not dashed:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = "token_throughput" if dashed else metric.replace("_e2e_s", "_latency")
        written += save(fig, figures, f"magnus_{name}", ["png"], dpi=120)
    return written


def change(target: float, base: float) -> float:
    """Relative change of target against base, % (positive = higher)."""
    return 100.0 * (target / base - 1.0)


def changes(frame: pd.DataFrame, target: str, base: str) -> pd.DataFrame:
    """Per common rate: the target's % change against base of each METRICS column."""
    mine = frame[frame["label"] == target].set_index("rate")
    theirs = frame[frame["label"] == base].set_index("rate")
    rates = sorted(set(mine.index) & set(theirs.index))
    return pd.DataFrame({m: [change(mine.loc[r, m], theirs.loc[r, m]) for r in rates]
                         for m, _ in METRICS}, index=pd.Index(rates, name="rate"))


def ratio_table(frame: pd.DataFrame, targets: Sequence[str], baselines: Sequence[str]) -> str:
    """Markdown: each target's change against the first baseline at every rate, then the range
    over rates against every baseline, then the paper's ranges."""
    first = baselines[0]
    head = " | ".join(f"{t} req/s | {t} mean | {t} p99" for t in targets)
    lines = [f"| vs {first}: rate | {head} |", "|---" * (1 + 3 * len(targets)) + "|"]
    per_target = [changes(frame, t, first) for t in targets]
    for rate in per_target[0].index:
        cells = [f"{c.loc[rate, m]:+.1f}%" for c in per_target for m, _ in METRICS]
        lines.append(f"| {rate:g} | " + " | ".join(cells) + " |")
    lines += ["", "| target | vs | req/s | mean latency | p99 latency |", "|---|---|---|---|---|"]
    for target in targets:
        for base in baselines:
            c = changes(frame, target, base)
            lines.append(f"| {target} | {base} (all rates) | " + " | ".join(
                f"{c[m].min():+.1f}% to {c[m].max():+.1f}%" for m, _ in METRICS) + " |")
    lines.append("| paper: Magnus | VS, VSQ, CCB | " + " | ".join(PAPER[m] for m, _ in METRICS)
                 + " |")
    return "\n".join(lines)


def draw(results: list[Path], figures: Path) -> list[Path]:
    """The four figures and the ratio table of RESULTS/magnus; ValueError when it has none of
    the targets or baselines."""
    frame = load(results[0])
    labels = list(dict.fromkeys(frame["label"]))
    targets = [t for t in TARGETS if t in labels]
    baselines = [b for b in BASELINES if b in labels]
    if not targets or not baselines:
        raise ValueError(f"{results[0]} has none of the targets {','.join(TARGETS)} or "
                         f"baselines {','.join(BASELINES)} (labels: {', '.join(labels)})")
    written = plot(frame, labels, figures)
    table = ratio_table(frame, targets, baselines)
    (results[0] / "magnus_ratios.md").write_text(table + "\n", encoding="utf-8")
    print(frame[PRINTED].to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print()
    print(table)
    return written + [results[0] / "magnus_ratios.md"]


HEADLINE_METRICS: tuple[tuple[str, str], ...] = (  # (column, header) of the headline table
    ("request_throughput", "request throughput"),
    ("valid_token_throughput", "valid-token throughput"),
    ("total_token_generated_throughput", "total-token throughput"),
    ("mean_e2e_s", "mean latency"), ("p99_e2e_s", "p99 latency"))
HEADLINE_PAIRS: tuple[tuple[str, str], ...] = (  # (target, baseline) rows
    ("Magnus", "VS"), ("Magnus", "VSQ"), ("Magnus", "CCB"), ("Magnus", "CCB-HF"), ("ABP", "GLP"),
    ("Magnus", "ABP"), ("Magnus-oracle", "VS"), ("Magnus-oracle", "CCB-HF"))
SHOWN = {"CCB": "CCB (paged)", "CCB-HF": "CCB (HF)"}  # label -> name in the headline rows
PAPER_ROWS: tuple[tuple[str, dict[str, str]], ...] = (  # the paper's, as far as known here
    ("**paper**: Magnus vs VS, VSQ, CCB", PAPER),
    ("**paper**: ABP vs GLP, Magnus vs ABP (Figs. 10-11)",
     {"request_throughput": "higher (values not known here)"}))


def saturated_rates(frame: pd.DataFrame, base: str = "VS") -> list[float]:
    """Rates at which `base` serves less than 95% of the offered load (where throughput can
    differ at all)."""
    rows = frame[frame["label"] == base]
    return sorted(float(r) for r, t in zip(rows["rate"], rows["request_throughput"])
                  if t < 0.95 * r)


def headline_table(frame: pd.DataFrame) -> str:
    """Markdown: every headline pair's change (range over VS-saturated rates, seed means) and
    the paper's rows (empty cells: the paper's number is not known here)."""
    rates = saturated_rates(frame)
    sat = frame[frame["rate"].isin(rates)]
    head = " | ".join(h for _, h in HEADLINE_METRICS)
    lines = [f"| change of | {head} |", "|---" * (1 + len(HEADLINE_METRICS)) + "|"]
    lines += [f"| {name} | " + " | ".join(cells.get(m, "") for m, _ in HEADLINE_METRICS) + " |"
              for name, cells in PAPER_ROWS]
    labels = set(frame["label"])
    for target, base in HEADLINE_PAIRS:
        if not {target, base} <= labels:
            continue
        mine, theirs = (sat[sat["label"] == x].set_index("rate") for x in (target, base))
        cells = []
        for metric, _ in HEADLINE_METRICS:
            c = [change(mine.loc[r, metric], theirs.loc[r, metric]) for r in rates]
            cells.append(f"{min(c):+.0f}% to {max(c):+.0f}%" if c else "n/a")
        lines.append(f"| {target} vs {SHOWN.get(base, base)} | " + " | ".join(cells) + " |")
    lines.append(f"\nRates (VS saturated): {', '.join(f'{r:g}' for r in rates)} req/s.")
    return "\n".join(lines)


def valid_share_table(frame: pd.DataFrame) -> str:
    """Markdown: per label, the share of generated tokens that are valid (valid / total
    generated-token throughput, %) at each VS-saturated rate."""
    rates = saturated_rates(frame)
    lines = ["| valid share of generated tokens | " + " | ".join(f"{r:g} req/s" for r in rates)
             + " |", "|---" * (1 + len(rates)) + "|"]
    share = 100.0 * frame["valid_token_throughput"] / frame["total_token_generated_throughput"]
    for label in dict.fromkeys(frame["label"]):
        rows = share[frame["label"] == label].set_axis(frame.loc[frame["label"] == label, "rate"])
        cells = [f"{rows.loc[r]:.0f}%" if r in rows.index else "n/a" for r in rates]
        lines.append(f"| {SHOWN.get(label, label)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m experiments.figures.magnus RESULTS`: the headline table of a finished sweep
    (e.g. results/magnus_paper), printed and written to RESULTS/magnus_headline.md."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m experiments.figures.magnus RESULTS_DIR", file=sys.stderr)
        return 2
    results = Path(args[0])
    if not (results / "summary.csv").is_file():
        print(f"error: no summary.csv in {results} (run the Magnus sweep into it first)",
              file=sys.stderr)
        return 2
    try:
        frame = load(results)
        labels = set(frame["label"])
        if not any(t in labels and b in labels for t, b in HEADLINE_PAIRS):
            pairs = ", ".join(f"{t}/{b}" for t, b in HEADLINE_PAIRS)
            raise ValueError(f"none of the headline pairs ({pairs}) among its labels "
                             f"({', '.join(sorted(labels))})")
        table = headline_table(frame) + "\n\n" + valid_share_table(frame)
    except (FileNotFoundError, KeyError, ValueError) as exc:  # not a Magnus sweep's results
        print(f"error: {results}: {exc}", file=sys.stderr)
        return 2
    (results / "magnus_headline.md").write_text(table + "\n", encoding="utf-8")
    print(table)
    return 0


PAGE = FigurePage("magnus", "docs/magnus.md", ("experiments/configs/magnus.yaml",), draw,
                  "Magnus vs VS, VSQ, CCB, GLP, ABP: throughput, latency, ratio table")


if __name__ == "__main__":
    raise SystemExit(main())
