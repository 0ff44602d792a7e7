"""Deployment search: the cheapest deployment of a model that meets an SLO on a workload.

    python -m experiments.search CONFIG [--set key.path=value ...] [--out DIR] [--jobs N]
        [--fresh] [--dry-run] [--no-progress] [--min-rate R] [--rel-tol F] [--probe-s S] ...
    servesim search CONFIG ...

1. Enumerate the candidates of the config's `search:` space (experiments/search/candidates.py):
   colocated units (GPU type x TP x scheduler x batch caps, one instance) and disaggregated ones
   (GPU type x P:D x prefill TP x decode TP), those within `max_gpus`.
2. Prune before any simulation (experiments/search/prune.py): units whose executors do not
   build (memory), whose config is refused, or whose zero-load TTFT / TPOT lower bound already
   misses the SLO (experiments/search/bounds.py).
3. One capacity search over every surviving candidate (experiments.capacity.main.run_capacity,
   one policy entry per candidate, probes in `--jobs` processes), into OUT/capacity/part-<k>;
   candidates an earlier run into the same OUT finished unchanged are reused
   (experiments/search/resume.py; `--fresh` reruns them).
4. Rank (experiments/search/rank.py) and write OUT/search.csv, OUT/search.json, OUT/pareto.png
   and OUT/configs/<label>.yaml (each accepted by experiments.run and experiments.capacity);
   print the top of the ranking and what was pruned.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.capacity.main import run_capacity
from experiments.files.exit_status import exit_status
from experiments.files.outdir import prepare_out_dir
from experiments.search.args import capacity_flags, parse_args
from experiments.search.candidates import enumerate_candidates
from experiments.search.config import SearchExperiment, load_search_config
from experiments.search.files import write_configs, write_tables
from experiments.search.plot import write_pareto
from experiments.search.prune import median_lengths, prune, pruned_counts
from experiments.search.rank import rank
from experiments.search.resume import finished, new_part, reusable
from experiments.search.table import format_ranked, notes
from sim.util.errors import ConfigError

__all__ = ["main", "run_search"]


def run_search(search: SearchExperiment, out_dir: Path, *, jobs: int = 1,
               progress: bool = True, fresh: bool = False,
               dry_run: bool = False, use_ray: bool = False) -> dict[str, Any]:
    """The whole search; returns {"rows": every candidate's row, "lines": what it printed
    after the table, "out": the folder}, and writes every output."""
    if jobs < 1:
        raise ConfigError("--jobs", jobs, "must be >= 1")
    out_dir = prepare_out_dir(out_dir)
    candidates, left_out = enumerate_candidates(search.space)
    median_prompt, median_output = median_lengths(search)
    screened = prune(search, candidates, median_prompt)
    kept = [s.candidate for s in screened if not s.pruned]
    capacity_dir = out_dir / "capacity"
    results, probes = ({}, pd.DataFrame()) if fresh else reusable(capacity_dir, search, kept)
    reused = len(results)
    todo = [c for c in kept if c.label not in results]
    if progress:
        print(f"{search.name}: {len(candidates)} candidates within {search.space.max_gpus} "
              f"GPUs, {len(kept)} after pruning, {reused} reused, {len(todo)} to search "
              f"(median prompt {median_prompt}, output {median_output} tokens)", flush=True)
    if todo and not dry_run:
        part = new_part(capacity_dir, search, todo)
        cfg = search.experiment([c.entry() for c in todo])
        for row in run_capacity(cfg, part, search.rates, progress=progress, jobs=jobs,
                                settings=search.settings, use_ray=use_ray):
            results[row["label"]] = row
        frame = finished(part)[1]
        probes = pd.concat([f for f in (probes, frame) if len(f)], ignore_index=True) \
            if len(probes) or len(frame) else probes
    rows = rank(search, screened, results, probes)
    counts = pruned_counts(screened)
    lines = notes(rows, left_out, counts, reused)
    summary = {"median_prompt_tokens": median_prompt, "median_output_tokens": median_output,
               "over_max_gpus": left_out, "pruned": counts, "reused": reused,
               "rules": {"steady": search.settings.steady.describe(),
                         "probe": search.settings.length.describe()}}
    write_tables(out_dir, search, rows, summary)
    write_configs(out_dir, search, rows, {c.label: c for c in candidates})
    write_pareto(rows, out_dir / "pareto.png", title=f"deployment search: {search.name}")
    return {"rows": rows, "lines": lines, "out": out_dir}


def search_command(args: argparse.Namespace) -> int:
    """The search the command line names; prints the ranked table."""
    search = load_search_config(args.config, args.overrides, capacity_flags(args))
    out_dir = Path(args.out) if args.out else Path("results") / search.name
    done = run_search(search, out_dir, jobs=args.jobs, progress=not args.no_progress,
                      fresh=args.fresh, dry_run=args.dry_run, use_ray=args.ray)
    target = search.space.target_rate
    order = (f"ranked by $ per hour for {target:g} req/s" if target is not None else
             "ranked by requests per dollar")
    print(f"\n{search.name}: deployments meeting {search.shared['slo']} ({order}) -> "
          f"{done['out']}\n{format_ranked(done['rows'])}")
    print("\n".join(done["lines"]))
    print(f"written: search.csv, search.json, pareto.png, configs/<label>.yaml in {done['out']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return exit_status(lambda: search_command(args),
                       written="the candidates finished before it are on disk (rerun the same "
                               "command to resume)",
                       interrupted="interrupted; finished candidates are on disk (rerun the "
                                   "same command to resume)")


if __name__ == "__main__":
    sys.exit(main())
