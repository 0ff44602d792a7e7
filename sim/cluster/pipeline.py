"""Pipeline parallelism: a model's layers in stages over GPU groups, batches in flight.

An instance with `pipeline_parallel` p > 1 splits its layers into p stages (vLLM's split,
`sim.cost.deployment.stage_layers`), each stage on a tensor-parallel group of its own. As vLLM
runs it (`max_concurrent_batches = p`: p virtual engines in V0, p batches in V1's batch queue),
p batches are in the pipeline at once: the instance is seen by the policy as p **virtual
instances**, each with its own queue of requests and 1/p of the pipeline's KV cache, sharing the
p stages. Every iteration of a virtual instance passes the stages in order; a stage works on one
pass at a time, first come first served (`PipelineClock`), and sends its activations (hidden
states and residual, 2 x hidden x 2 bytes a token) to the next stage over `link`.

Stage times come from the cluster's cost model, not from a table: one iteration's time T(n) of
the same step on a model of n layers is linear in n, so the time of a layer is d = T(n) - T(n-1)
and the rest F = T(n) - n d (embedding, lm_head, sampler, host work) is charged on the last
stage. A stage of k layers takes k d. With balanced stages and p batches in flight the pipeline
completes p iterations in the time of one; the bubble is what an idle virtual instance leaves.
For m equal one-iteration batches entering at once, the last leaves after (m + p - 1) stage
times plus transfers (the GPipe closed form, `tests/test_pipeline.py`).

Each virtual instance runs one iteration per step (a step is cut after its first iteration,
as an arrival cuts it), so every stage reservation is one the engine runs. What is not
modelled yet, refused by name: static batches (a policy whose steps may not be cut), MoE models,
draft models, Medusa heads, LoRA, calibrated or real backends, scheduling overhead, a
cluster-wide pipeline with instance groups (a group may have its own: `cluster.instances`). A virtual instance's busy time is its passes' time in the pipeline, waits for a busy
stage included, so a run's energy counts a waiting pass as busy (docs/pipeline.md).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np

from sim.cluster.cost_executor import CostModelExecutor
from sim.core.executor import InstanceInfo, Step, StepResult
from sim.cost.deployment import ACT_DTYPE_BYTES, DeploymentSpec, kv_dtype_bytes, stage_layers
from sim.memory.kv_transfer import Link
from sim.util.errors import ConfigError

FIELD = "cluster.pipeline_parallel"  # the option every refusal names


class PipelineClock:
    """The p stages of one pipeline: when each is next free (absolute simulated seconds)."""

    def __init__(self, layers: tuple[int, ...], link: Link) -> None:
        self.layers = layers  # layers of each stage
        self.link = link  # stage-to-stage activation link
        self.free_s = [0.0] * len(layers)  # absolute seconds each stage is next free
        self.now: Callable[[], float] | None = None  # the simulation's clock, once bound

    def bind(self, env: Any) -> None:
        """Start a run: every stage free, time read from the simpy environment `env`."""
        self.free_s = [0.0] * len(self.layers)
        self.now = lambda: env.now

    def transfer_s(self, num_tokens: int, hidden_size: int) -> float:
        """Seconds to send one pass's activations (hidden states + residual) to the next stage."""
        size = 2 * hidden_size * ACT_DTYPE_BYTES * num_tokens
        return self.link.latency_s + size / self.link.bandwidth_bytes_per_s

    def pass_through(self, start_s: float, stage_s: list[float], transfer_s: float) -> float:
        """Reserve one pass entering at `start_s` whose stage k takes stage_s[k] seconds; the
        absolute time it leaves the last stage."""
        t = start_s
        for k, seconds in enumerate(stage_s):
            if k:
                t += transfer_s
            t = max(t, self.free_s[k]) + seconds
            self.free_s[k] = t
        return t


class PipelineExecutor:
    """One virtual instance of a pipeline: its share of the KV cache, its passes timed through
    the shared `PipelineClock`."""

    def __init__(self, full: CostModelExecutor, less: CostModelExecutor, clock: PipelineClock,
                 capacity_tokens: int, deployment: DeploymentSpec) -> None:
        self.full = full  # the step on a model of n layers (one TP group)
        self.less = less  # the same step on n - 1 layers
        self.clock = clock  # the stages, shared by the pipeline's virtual instances
        self.capacity = capacity_tokens  # tokens: this virtual instance's share of the KV
        self.deployment = deployment  # the pipeline's deployment (memory, name)

    @property
    def kv_capacity_tokens(self) -> int:
        """KV tokens of this virtual instance (the pipeline's capacity / stages)."""
        return self.capacity

    @property
    def max_model_len(self) -> int:
        """The model's context in tokens."""
        return self.deployment.model.max_position_embeddings

    @property
    def exact_up_to(self) -> tuple[int, str] | None:
        """As CostModelExecutor's: a sliding window the cost model does not price."""
        return self.deployment.model.exact_up_to

    @property
    def name(self) -> str:
        """Human label, e.g. "llama-3.1-70b fp16 on H100-80GB x4 pp2"."""
        return self.deployment.name

    def bind_clock(self, env: Any) -> None:
        """The engine hands over its simpy environment before a run (sim/engine/simulate.py)."""
        self.clock.bind(env)

    def instance_info(self, instance_id: int) -> InstanceInfo:
        """What a policy may know about this virtual instance."""
        info = self.full.instance_info(instance_id)  # its GPU, links; the model's own layers:
        model = self.deployment.model
        return dataclasses.replace(info, kv_capacity_tokens=self.capacity, name=self.name,
                                   num_layers=model.num_layers, kv_bytes_per_token=float(
                                       model.kv_bytes_per_token(
                                           kv_dtype_bytes(self.deployment.kv_dtype))))

    def stage_seconds(self, step: Step) -> list[float]:
        """Seconds of each stage for the step's first iteration: k d per stage of k layers,
        the rest of the iteration (F) on the last."""
        t_full = self.full.execute(step).duration_s
        per_layer = max(t_full - self.less.execute(step).duration_s, 0.0)
        n = self.full.num_layers  # layers of the timing model
        rest = max(t_full - n * per_layer, 0.0)
        out = [k * per_layer for k in self.clock.layers]
        out[-1] += rest
        return out

    def execute(self, step: Step, until_s: float = math.inf) -> StepResult:
        """One iteration of `step` through the pipeline (a step is cut after it, as an arrival
        would cut it); OOM when its KV footprint exceeds this virtual instance's share."""
        if self.clock.now is None:
            raise ConfigError(FIELD, len(self.clock.layers), "a pipeline executor runs inside a "
                              "simulation (sim.engine.simulate.run_simulation binds its clock)")
        if step.num_iterations > 1 and not step.stop_on_arrival:
            raise ConfigError(FIELD, len(self.clock.layers), "the policy runs static batches "
                              "(steps that may not be cut); pipeline parallelism is modelled for "
                              "iteration-level policies (vllm, vllm_v0, sarathi, orca, ...)")
        one = step if step.num_iterations == 1 else dataclasses.replace(step, num_iterations=1)
        stage_s = self.stage_seconds(one)
        now, num_tokens = self.clock.now(), sum(one.num_new_tokens)
        transfer = self.clock.transfer_s(num_tokens, self.deployment.model.hidden_size)
        duration = self.clock.pass_through(now, stage_s, transfer) - now
        kv = num_tokens + sum(one.num_context_tokens) - one.num_shared_kv_tokens
        if kv > self.capacity:
            return StepResult(duration, np.empty(0), oom=True)
        return StepResult(duration, np.array([duration]))


def timing_executor(deployment: DeploymentSpec, num_layers: int,
                    build_cost_model: Callable[[DeploymentSpec], Any]) -> CostModelExecutor:
    """An executor timing the deployment's steps on a model of `num_layers` layers on one
    tensor-parallel group (memory checks off: only its time is read)."""
    whole = deployment.model  # its sliding-window layers are not priced (sim/models/model_spec.py)
    model = dataclasses.replace(whole, num_layers=num_layers,
                                num_sliding_layers=min(whole.num_sliding_layers, num_layers))
    gpu = dataclasses.replace(deployment.gpu, memory_bytes=deployment.gpu.memory_bytes * 1024)
    timed = dataclasses.replace(deployment, model=model, gpu=gpu, pipeline_parallel=1)
    return CostModelExecutor(build_cost_model(timed))


def build_pipeline_executors(deployment: DeploymentSpec, num_instances: int, link: Link,
                             build_cost_model: Callable[[DeploymentSpec], Any]) -> list:
    """`num_instances` pipelines of `deployment.pipeline_parallel` virtual instances each."""
    if deployment.model.moe is not None:
        raise ConfigError(FIELD, deployment.pipeline_parallel,
                          f"{deployment.model.name} is a mixture-of-experts model; pipeline "
                          f"parallelism is modelled for dense models only")
    p, layers = deployment.pipeline_parallel, stage_layers(deployment.model.num_layers,
                                                            deployment.pipeline_parallel)
    n = max(max(layers), 2)  # the busiest stage's layers (two at least: one to difference)
    full = timing_executor(deployment, n, build_cost_model)
    less = timing_executor(deployment, n - 1, build_cost_model)
    share = deployment.kv_capacity_tokens // p
    executors = []
    for _ in range(num_instances):
        clock = PipelineClock(layers, link)
        executors += [PipelineExecutor(full, less, clock, share, deployment)
                      for _ in range(p)]
    return executors
