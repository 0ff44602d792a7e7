"""What the serve loop accounts per model instance: busy time, steps, iterations, KV peaks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class InstanceStats:
    """Per-instance accounting kept by the serve loop."""

    instance_id: int  # index of the instance
    kv_capacity_tokens: int  # tokens
    busy_s: float = 0.0  # wall seconds spent in steps, scheduling gaps included
    gpu_busy_s: float = 0.0  # seconds the GPU computed (busy_s less exposed scheduling gaps)
    sched_s: float = 0.0  # modelled scheduler CPU seconds (hidden by async mode or not)
    policy_host_s: float = 0.0  # measured host seconds in policy.next_step + update
    num_steps: int = 0  # Steps executed
    num_iterations: int = 0  # model iterations executed
    seq_iterations: int = 0  # sum over iterations of the batch size
    peak_kv_tokens: int = 0  # largest KV footprint of a step, tokens
    peak_reserved_kv_tokens: int = 0  # largest KV reservation reported by the policy, tokens
