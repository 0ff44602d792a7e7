"""What a deployment search writes: OUT/search.csv, OUT/search.json and OUT/configs/<label>.yaml.

Each simulated candidate's config is a plain experiment config that `python -m experiments.run`
and `python -m experiments.capacity` accept: the search's shared sections, the candidate's
cluster (the shared one with its overrides laid over: gpu, tensor_parallel, instances), its one
policy entry, and `request_rates: [its capacity]` (the search's first rate when it has none).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import yaml

from experiments.report.results import write_csv, write_json, write_text
from experiments.search.candidates import Candidate
from experiments.search.config import SearchExperiment
from experiments.search.space import describe

HEADER = ("# A deployment search's candidate ({search}, rank {rank}: {capacity:.4g} req/s at "
          "the SLO).\n#   python -m experiments.run {path}\n"
          "#   python -m experiments.capacity {path}\n")


def candidate_config(search: SearchExperiment, candidate: Candidate,
                     rate: float) -> dict[str, Any]:
    """The candidate's standalone experiment config (plain data) at `rate` req/s."""
    entry = candidate.entry()
    cluster = {**(search.shared.get("cluster") or {}), **entry.pop("cluster")}
    raw = search.raw_experiment([entry])
    return {"name": candidate.label, **{k: v for k, v in raw.items() if k != "name"},
            "cluster": cluster, "request_rates": [float(rate)]}


def write_configs(out_dir: Path, search: SearchExperiment, rows: Sequence[Mapping[str, Any]],
                  candidates: Mapping[str, Candidate]) -> list[Path]:
    """OUT/configs/<label>.yaml for every simulated candidate."""
    folder = out_dir / "configs"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for row in rows:
        if row["status"] != "simulated":
            continue
        capacity = row["capacity_rps"]
        rate = capacity if capacity > 0 else search.rates.min_rate
        raw = candidate_config(search, candidates[row["label"]], rate)
        path = folder / f"{row['label']}.yaml"
        head = HEADER.format(search=search.name, rank=row["rank"], capacity=capacity, path=path)
        write_text(path, head + yaml.safe_dump(raw, sort_keys=False))
        paths.append(path)
    return paths


def write_tables(out_dir: Path, search: SearchExperiment, rows: Sequence[Mapping[str, Any]],
                 summary: Mapping[str, Any]) -> None:
    """OUT/search.csv (every candidate, pruned ones with their reason) and OUT/search.json
    (the space, the counts, the rows)."""
    write_csv(out_dir / "search.csv", pd.DataFrame(list(rows)))
    write_json(out_dir / "search.json", {"name": search.name, "space": describe(search.space),
                                         **summary, "candidates": list(rows)})
