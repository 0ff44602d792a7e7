"""What a run measures on the host's wall clock, kept apart from its simulated results.

A simulation's results depend only on its inputs: two runs of one config give the same records,
steps and summary to the bit. The only wall-clock measurement the engine takes is the policy's
host time (`policy.next_step` + `policy.update`, `time.perf_counter`, sim/engine/simulation.py): the steps
table's `policy_host_s` column in memory, and this module's `host_summary` of the instances.
It is not in the run summary. experiments/files/host_files.py writes it, with the run's wall time,
into each run's `host_timing.json` / `host_timing.parquet`, the files two identical runs differ
in; `real.calibrate --scheduling` fits the scheduling overhead to `host_timing.parquet`.
"""

from __future__ import annotations

from typing import Any, Sequence

from sim.records.instance_stats import InstanceStats
from sim.records.recorder import STEP_COLUMNS

MEASURED_STEP_COLUMNS = ("policy_host_s",)  # step columns measured on the host's clock
RESULT_STEP_COLUMNS = tuple(c for c in STEP_COLUMNS if c not in MEASURED_STEP_COLUMNS)
# the step columns of host_timing.parquet: the step's keys and shape, then what was measured
HOST_STEP_COLUMNS = ("instance_id", "start_s", "num_iterations", "num_seqs",
                     *MEASURED_STEP_COLUMNS)


def host_summary(stats: Sequence[InstanceStats]) -> dict[str, Any]:
    """The policy's measured host time: in all (seconds), per step, and per instance."""
    steps = sum(s.num_steps for s in stats)
    total = sum(s.policy_host_s for s in stats)
    return {"policy_host_s": total, "num_steps": steps,
            "policy_host_s_per_step": total / steps if steps else 0.0,
            "instances": [{"instance_id": s.instance_id, "policy_host_s": s.policy_host_s,
                           "num_steps": s.num_steps} for s in stats]}
