"""Resuming a search: the capacity runs of earlier invocations, reused where nothing changed.

The capacity search itself has no resume (`run_capacity` starts every policy afresh and rewrites
its OUT/capacity.csv), but it writes each policy's row as soon as that policy finishes. So each
invocation of the deployment search runs its capacity search in a new folder
OUT/capacity/part-<k>, next to `candidates.json` (label -> fingerprint of everything its result
depends on: its policy entry, the shared experiment sections, the rate search and the probe
rules, the simulator's code, the trace file's content). A later invocation reuses every finished
candidate of every earlier part whose fingerprint is unchanged (the latest part wins) and runs
only the others: an interrupted search loses only its unfinished candidates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.files.resume import file_digest, simulator_version
from experiments.report.results import write_json
from experiments.search.candidates import Candidate
from experiments.search.config import SearchExperiment
from experiments.sweep.workload import trace_path

PART = "part-{}"  # one invocation's capacity folder under OUT/capacity
FINGERPRINTS = "candidates.json"  # label -> fingerprint, in each part


def fingerprint(search: SearchExperiment, candidate: Candidate) -> str:
    """A hash of everything a candidate's capacity depends on: its entry, the shared sections,
    the rate search and probe rules, the simulator's code (as a sweep's resume reads it,
    experiments/files/resume.py) and the trace file's content."""
    data = {"entry": candidate.entry(), "shared": search.shared,
            "rates": dataclasses.asdict(search.rates),
            "settings": dataclasses.asdict(search.settings),
            "simulator": simulator_version(), "trace": trace_content(search)}
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def trace_content(search: SearchExperiment) -> str | None:
    """The digest of the trace file the workload reads (None: a synthetic workload)."""
    trace = search.experiment([{"name": "vllm", "cluster": {"gpu": search.space.gpus[0]}}]) \
        .workload.trace
    return None if trace is None else file_digest(trace_path(trace))


def parts(capacity_dir: Path) -> list[Path]:
    """The earlier parts, oldest first."""
    found = [(int(p.name.split("-")[1]), p) for p in capacity_dir.glob("part-*")
             if p.is_dir() and p.name.split("-")[1].isdigit()]
    return [p for _, p in sorted(found)]


def new_part(capacity_dir: Path, search: SearchExperiment,
             candidates: Sequence[Candidate]) -> Path:
    """A fresh part folder holding the fingerprints of the candidates it will run."""
    earlier = parts(capacity_dir)
    number = int(earlier[-1].name.split("-")[1]) + 1 if earlier else 1
    folder = capacity_dir / PART.format(number)
    folder.mkdir(parents=True)
    write_json(folder / FINGERPRINTS, {c.label: fingerprint(search, c) for c in candidates})
    return folder


def finished(folder: Path) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """A part's finished capacity rows and its probes (empty when it has none)."""
    results, probes = folder / "capacity.json", folder / "capacity_probes.csv"
    rows = json.loads(results.read_text(encoding="utf-8")) if results.is_file() else []
    frame = pd.read_csv(probes) if probes.is_file() and probes.stat().st_size else pd.DataFrame()
    return rows, frame


def reusable(capacity_dir: Path, search: SearchExperiment, candidates: Sequence[Candidate]
             ) -> tuple[dict[str, dict[str, Any]], pd.DataFrame]:
    """The capacity rows (by label) and probes of candidates an earlier part finished with
    the same fingerprint."""
    wanted = {c.label: fingerprint(search, c) for c in candidates}
    rows: dict[str, dict[str, Any]] = {}
    probes: dict[str, pd.DataFrame] = {}
    for folder in parts(capacity_dir):
        marks_path = folder / FINGERPRINTS
        if not marks_path.is_file():
            continue
        marks = json.loads(marks_path.read_text(encoding="utf-8"))
        done, frame = finished(folder)
        for row in done:
            label = row.get("label")
            if label in wanted and marks.get(label) == wanted[label]:
                rows[label] = row
                probes[label] = frame[frame["label"] == label] if len(frame) else frame
    kept = [f for f in probes.values() if len(f)]
    return rows, (pd.concat(kept, ignore_index=True) if kept else pd.DataFrame())
