"""Table I of the Magnus paper on this project's workload: how a request's generation length
correlates with its user input length, per application and per task.

    python -m experiments.papers.magnus_table1 [--path FILE] [--markdown]

The paper's Table I motivates length prediction by a positive input/output correlation in
popular LMaaS applications. Here it is computed on the shared workload (all 20,000 requests,
both splits; generation length = the reference answer's tokens, not ChatGLM-6B's outputs):
Pearson on token counts, Pearson on log(1 + tokens) (what the workload README quotes) and
Spearman. `PAPER_TABLE_I` holds the paper's values where they are known to this project.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

# The paper's Table I, per application (Pearson). Left empty: this session's copy of the paper
# (arXiv 2406.04785) had its abstract only, and the value must not be guessed; fill it from the
# PDF. An application without a value prints "n/a".
PAPER_TABLE_I: Mapping[str, float] = {}
COLUMNS = ("group", "requests", "pearson", "pearson_log", "spearman", "paper")


def _row(group: str, inputs: np.ndarray, outputs: np.ndarray) -> dict[str, object]:
    """Correlations of one group's input and output token counts."""
    x, y = inputs.astype(np.float64), outputs.astype(np.float64)
    ranks = pd.Series(x).rank().to_numpy(), pd.Series(y).rank().to_numpy()
    return {"group": group, "requests": len(x),
            "pearson": float(np.corrcoef(x, y)[0, 1]),
            "pearson_log": float(np.corrcoef(np.log1p(x), np.log1p(y))[0, 1]),
            "spearman": float(np.corrcoef(*ranks)[0, 1]),
            "paper": PAPER_TABLE_I.get(group)}


def length_correlations(records: pd.DataFrame) -> pd.DataFrame:
    """One row per application, then per task (`app/task`) where an app has several, then all:
    correlations of `input_tokens` (the user input) with `output_tokens`."""
    for column in ("app", "task", "input_tokens", "output_tokens"):
        if column not in records.columns:
            raise ValueError(f"length_correlations needs a column {column!r}")
    rows = []
    for app, group in records.groupby("app", sort=True):
        rows.append(_row(str(app), group["input_tokens"].to_numpy(),
                         group["output_tokens"].to_numpy()))
        if group["task"].nunique() > 1:
            for task, sub in group.groupby("task", sort=True):
                rows.append(_row(f"{app}/{task}", sub["input_tokens"].to_numpy(),
                                 sub["output_tokens"].to_numpy()))
    rows.append(_row("all", records["input_tokens"].to_numpy(),
                     records["output_tokens"].to_numpy()))
    return pd.DataFrame(rows, columns=list(COLUMNS))


PAPER_CLAIM = 0.8  # the paper: input/output correlation above 0.8 "for most apps"


def tasks_above(records: pd.DataFrame,
                threshold: float = PAPER_CLAIM) -> tuple[list[str], list[str]]:
    """(tasks whose Pearson correlation exceeds `threshold`, the other tasks), names sorted."""
    pearson = {str(task): float(np.corrcoef(g["input_tokens"].astype(np.float64),
                                            g["output_tokens"].astype(np.float64))[0, 1])
               for task, g in records.groupby("task", sort=True)}
    return ([t for t, r in pearson.items() if r > threshold],
            [t for t, r in pearson.items() if not r > threshold])


def claim_line(records: pd.DataFrame, threshold: float = PAPER_CLAIM) -> str:
    """One sentence: in how many tasks the paper's "> 0.8 for most apps" holds here."""
    above, below = tasks_above(records, threshold)
    return (f"Pearson > {threshold:g} in {len(above)} of {len(above) + len(below)} tasks "
            f"({', '.join(above)}); not in {', '.join(below) or 'none'}.")


def to_markdown(table: pd.DataFrame) -> str:
    """The table as a Markdown table (two decimals; n/a where the paper's value is unknown)."""
    lines = ["| application / task | requests | Pearson | Pearson (log) | Spearman | paper |",
             "|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        paper = "n/a" if r.paper is None or pd.isna(r.paper) else f"{r.paper:.2f}"
        lines.append(f"| {r.group} | {r.requests:,} | {r.pearson:.2f} | {r.pearson_log:.2f} | "
                     f"{r.spearman:.2f} | {paper} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from sim.util.errors import ConfigError, TraceError
    from traces.magnus_workload import read_magnus_apps

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", type=Path, default=None,
                        help="a Magnus-format JSONL (default: the shared workload)")
    args = parser.parse_args(argv)
    try:
        records = read_magnus_apps(args.path)
        print(to_markdown(length_correlations(records)))
        print()
        print(claim_line(records))
    except (ConfigError, TraceError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
