"""Fixed-rate probes, no search: `python -m experiments.capacity CONFIG --rates 28,30,32`.

Each (policy, seed, rate) is one probe exactly as a capacity search runs it
(experiments/capacity/probe.py: the probe-length rule, the measured window, the steady-state
check), so `--rates C --probe-s 1800 --probe-doublings 0` checks a capacity C against 30-minute
runs. Writes OUT/rate_probes.csv (one row per probe) and prints a table with the offered and
delivered rates, whether each probe was steady, the attainment on its measured requests and on
all of them, and whether it met the SLO.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from experiments.capacity.probe import ProbeSettings, probe_line, probe_results
from experiments.config.experiment import ExperimentConfig
from experiments.files.outdir import prepare_out_dir
from experiments.report.results import write_csv
from sim.metrics.slo import SLO

COLUMNS = {"label": "policy", "seed": "seed", "rate": "rate", "num_requests": "requests",
           "offered_rps": "offered", "delivered_rps": "delivered", "steady": "steady",
           "slo_attainment": "attainment (measured)",
           "all_slo_attainment": "attainment (all requests)", "request_goodput": "goodput",
           "p90_ttft_s": "p90 TTFT s", "p99_tpot_s": "p99 TPOT s",
           "meets_slo": "meets SLO"}  # rate_probes.csv column -> printed header


def run_rates(cfg: ExperimentConfig, slo: SLO | None, base: pd.DataFrame | None,
              rates: Sequence[float], out_dir: Path, settings: ProbeSettings, *,
              jobs: int = 1, progress: bool = True) -> list[dict[str, Any]]:
    """Probe every policy at every rate for every seed; OUT/rate_probes.csv; the rows in
    (policy, seed, rate) order."""
    out_dir = prepare_out_dir(out_dir)
    calls = [(cfg, i, slo, base, rate, seed, settings) for i in range(len(cfg.policies))
             for seed in cfg.seeds for rate in rates]
    rows = []
    for row in probe_results(calls, jobs):
        if progress:
            print(probe_line(row), flush=True)
        rows.append(row)
    rows.sort(key=lambda r: (r["index"], r["seed"], r["rate"]))
    write_csv(out_dir / "rate_probes.csv",
              pd.DataFrame([{k: v for k, v in r.items() if k != "index"} for r in rows]))
    return rows


def format_rates(rows: Sequence[dict[str, Any]]) -> str:
    """The printed table of fixed-rate probes."""
    if not rows:
        return "(no probes)"
    frame = pd.DataFrame(list(rows))
    table = frame[[c for c in COLUMNS if c in frame.columns]].rename(columns=COLUMNS)
    return ("(rates and goodput in req/s; rate: asked, offered / delivered: arrivals / "
            "completions per second over the measured window)\n"
            + table.to_string(index=False, float_format="%.4g"))
