"""`magnus`, `abp`, `glp`: Magnus (Cheng et al., ICWS 2024, arXiv 2406.04785) and its ablations.

On arrival a request's generation length is predicted (`predictor.py`) and the request joins
the queued batch it wastes the least memory access in, or opens a new one (`batcher.py`). When an
instance is idle it takes one queued batch (`scheduler.py`: HRRN with the KNN batch-time
estimate of `estimator.py` for Magnus, oldest-first for GLP / ABP) and runs it as one padded
static batch (`policies.static_batch`). A batch that runs out of KV memory (its true lengths
exceed the predictions) loses the time until the failure and is split into two halves that go
back to the queue. Finished requests and batches feed continuous learning (`learning.py`).

Ablations, as in the paper: GLP = predictor + WMA batching with a fixed batch size; ABP = GLP
without the size cap; Magnus = ABP + batch-time estimator + HRRN.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from sim.cluster.hf_static import HFStaticExecutor
from sim.core.executor import InstanceInfo, Step, StepResult
from sim.core.request import Request
from sim.records.recorder import Recorder
from sim.util.errors import ConfigError

from policies.base import Policy
from policies.magnus.batcher import AdaptiveBatcher, QueuedBatch
from policies.magnus.config import ABPConfig, GLPConfig, MagnusConfig
from policies.magnus.embedding import Embedder
from policies.magnus.estimator import BatchSample, BatchTimeEstimator, IterationTimer
from policies.magnus.learning import ContinuousLearner, is_large_error
from policies.magnus.length_service import LearningSettings, LengthService
from policies.magnus.memory import batch_memory
from policies.magnus.profiling import profile_batches
from policies.magnus.scheduler import pick_fcfs, pick_hrrn
from policies.registry import register_policy
from policies.static_batch import (fail_static_batch, finish_static_batch, reset_for_retry,
                                   split_batch, static_step, static_tokens_per_request)


@register_policy("magnus")
class MagnusPolicy(Policy):
    Config = MagnusConfig
    config: MagnusConfig

    def __init__(self, config: MagnusConfig, instances: Sequence[InstanceInfo],
                 recorder: Recorder, rng: np.random.Generator,
                 embedder: Embedder | None = None) -> None:
        super().__init__(config, instances, recorder, rng)
        cfg = self.config
        self.capacity = min(i.kv_capacity_tokens for i in self.instances)  # KV tokens
        self.whole_memory = batch_memory(self.instances, 1.0, cfg.memory_check)  # admission
        learning = LearningSettings(cfg.predictor_retrain_period_s, cfg.predictor_error_tokens,
                                    cfg.predictor_error_fraction, cfg.retrain_delay_s,
                                    cfg.max_learning_samples)
        self.lengths = LengthService(cfg.predictor, learning, rng, recorder, embedder)
        self.memory = batch_memory(self.instances, cfg.memory_fraction, cfg.memory_check)  # Θ
        self.batcher = AdaptiveBatcher(self.memory, cfg.wma_threshold, cfg.wma_aggregate,
                                       cfg.batch_size)
        self.timer = IterationTimer(cfg.cold_iteration_s)
        profiled = self._profile(rng)  # offline samples; None: the estimator learns online
        self.offline = profiled is not None  # learns from actual lengths, no warm-up batches
        base = profiled or []
        self.estimator = BatchTimeEstimator(cfg.knn_neighbors).fit(base)
        self.time_learner: ContinuousLearner[BatchSample, BatchTimeEstimator] = \
            ContinuousLearner("estimator", cfg.estimator_retrain_period_s, cfg.retrain_delay_s,
                              cfg.max_learning_samples,
                              lambda samples: self.estimator.fit(base + samples), recorder)
        self.running: dict[int, QueuedBatch] = {}  # instance -> batch in flight
        self.num_batches_done = 0  # batches that completed (the estimator's warm-up counter)
        self.reserved: dict[int, int] = {}  # instance -> KV tokens its batch touches

    # ---- learning ---------------------------------------------------------------------
    def _profile(self, rng: np.random.Generator) -> list[BatchSample] | None:
        """The estimator's offline training data (`profiling.py`), or None to learn online."""
        cfg, model = self.config, self.lengths.model
        engine = self.instances[0].engine
        executor = engine if isinstance(engine, HFStaticExecutor) else None
        mode = cfg.estimator_training
        if mode == "auto":  # FCFS (GLP, ABP) never consults the estimator
            timeable = executor is not None and bool(model.base_queries)
            mode = "offline" if timeable and cfg.scheduler == "hrrn" else "online"
        if mode == "online":
            return None
        if executor is None:
            raise ConfigError("estimator_training", mode, "offline profiling needs an engine "
                              "that can be timed offline (cluster.engine: {kind: hf_static})")
        if not model.base_queries:
            raise ConfigError("estimator_training", mode, "offline profiling needs training "
                              "requests (predictor.train_path)")
        apps = model.catalog.apps
        lengths = [(q.input_tokens + (apps[q.app].instruction_tokens if q.app in apps else 0),
                    q.true_output_tokens) for q in model.base_queries]
        samples = profile_batches(lengths, executor, self.memory, cfg.wma_threshold,
                                  cfg.wma_aggregate, cfg.batch_size,
                                  max_requests=cfg.estimator_profile_requests, rng=rng)
        self.recorder.event(0.0, "profile_estimator", -1, f"{len(samples)} batches")
        return samples

    def _poll_learners(self, now: float) -> None:
        self.lengths.poll(now)
        estimator = self.time_learner.poll(now)
        if estimator is not None:
            self.estimator = estimator

    def _learn(self, batch: QueuedBatch, result: StepResult, finished: list[Request]) -> None:
        """Continuous learning from a finished batch. The paper's filter: re-estimate the batch
        with its *actual* longest generation G(B) (the dispatch estimate used G'(B), so its error
        mixes the predictor's miss into the estimator's) and keep the batch as a sample, with
        G(B), when that re-estimate misses the measured time by both tolerances."""
        cfg = self.config
        longest = max(r.target_output_tokens for r in batch.requests)  # G(B), tokens
        reestimate_s = self.estimator.estimate(batch.size, batch.max_prompt, longest, self.timer)
        self.timer.observe(result.duration_s, result.num_iterations)
        self.num_batches_done += 1
        warm_up = not self.offline and self.num_batches_done <= cfg.estimator_warmup_batches
        if warm_up or is_large_error(reestimate_s, result.duration_s, cfg.estimator_error_s,
                                     cfg.estimator_error_fraction):
            self.time_learner.collect(BatchSample(batch.size, batch.max_prompt, longest,
                                                  result.duration_s))
        self.lengths.observe(finished)

    # ---- the policy interface ---------------------------------------------------------
    def add_request(self, request: Request, now: float) -> bool:
        self._poll_learners(now)
        if not self.whole_memory.fits(1, request.num_prompt_tokens, 1):
            request.reject(now, f"prompt of {request.num_prompt_tokens} tokens does not fit "
                                f"the memory (KV capacity {self.capacity} tokens)")
            return False
        predicted = self.lengths.predict(request)
        self.batcher.insert(request, request.num_prompt_tokens, predicted)
        return True

    def estimate_s(self, batch: QueuedBatch) -> float:
        """Estimated serving time of a queued batch, seconds."""
        return self.estimator.estimate(batch.size, batch.max_prompt, batch.max_predicted,
                                       self.timer)

    def next_step(self, instance_id: int, now: float) -> Step | None:
        self._poll_learners(now)
        if not self.batcher.batches:
            return None
        if self.config.scheduler == "hrrn":
            batch = pick_hrrn(self.batcher.batches, now, self.estimate_s)
        else:
            batch = pick_fcfs(self.batcher.batches)
        self.batcher.remove(batch)
        self.running[instance_id] = batch
        step = static_step(instance_id, batch.requests, now)
        self.reserved[instance_id] = min(step.kv_tokens_after(step.num_iterations),
                                         self.instances[instance_id].kv_capacity_tokens)
        return step

    def update(self, step: Step, result: StepResult, now: float) -> list[Request]:
        self._poll_learners(now)
        batch = self.running.pop(step.instance_id)
        self.reserved[step.instance_id] = 0
        if result.oom:
            return self._recover(step, batch, result, now)
        finished = finish_static_batch(batch.requests, result, now, self.recorder)
        self._learn(batch, result, finished)
        return finished

    def _recover(self, step: Step, batch: QueuedBatch, result: StepResult,
                 now: float) -> list[Request]:
        """OOM: split the batch into two halves that queue again; a lone request fails."""
        m = result.num_iterations
        wasted = static_tokens_per_request(step.num_new_tokens[0], m)  # per request
        self.recorder.event(now, "oom", -1, f"batch of {batch.size} on instance "
                                            f"{step.instance_id} after {m} iterations")
        if batch.size > 1:
            reset_for_retry(batch.requests, wasted)
            for half in split_batch(batch.requests):
                self.batcher.requeue(half)
            return []
        request = batch.requests[0]
        fail_static_batch([request], wasted, now, "out of KV memory even alone")
        self.lengths.forget(request.request_id)
        return [request]

    def num_reserved_kv_tokens(self, instance_id: int) -> int:
        return self.reserved.get(instance_id, 0)


@register_policy("abp")
class ABPPolicy(MagnusPolicy):
    """ABP: adaptive batch sizes, batches first-come first-served (no estimator, no HRRN)."""

    Config = ABPConfig


@register_policy("glp")
class GLPPolicy(MagnusPolicy):
    """GLP: length-aware batching with a fixed batch size, batches first-come first-served."""

    Config = GLPConfig
