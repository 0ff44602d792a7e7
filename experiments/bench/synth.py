"""Write a synthetic `vllm bench serve --save-result --save-detailed` result, to try
`servesim calibrate` and `servesim run --workload` without a GPU.

    python -m experiments.bench.synth --out bench.json [--rate 4] [--num-prompts 400]
        [--seed 0] [--no-start-times]

NOT a measurement. The "server" is the simulator itself under settings the calibration does
not know and cannot represent exactly (`SERVER`, `SERVER_POLICY`): Llama-2-7B on one
A100-80GB under `vllm`, its GEMMs 10% and decode attention 20% slower than the simulator's
A100 parameters, 4 ms + 30 us per sequence of host work per step in series with the GPU; a
frontend latency per request that grows with the prompt (15 ms + 5 us per prompt token, times
lognormal jitter of sigma 0.25: HTTP, tokenization, streaming); each request's inter-token gaps
are the server's iterations while it decoded (long where a prefill joined), jittered (gamma,
CV 0.1). Lengths are lognormal (prompt median 250, output
median 150 tokens), arrivals vLLM's Poisson schedule at `--rate`. The file has the keys vLLM
writes (`start_times` unless --no-start-times); the seed fixes every draw.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from policies.registry import policy_factory
from sim.cluster.spec import ClusterSpec
from sim.cost.gpu_params import stage_params_for
from sim.fit.bench_replay import replay_run
from sim.util.errors import ConfigError
from traces.bench_results import send_schedule

MODEL, GPU = "llama-2-7b", "A100-80GB"  # what the synthetic server runs
SERVER_POLICY = "vllm"  # its scheduler (today's vLLM V1)
FRONTEND_FIXED_S = 0.015  # seconds of frontend latency per request
FRONTEND_PER_TOKEN_S = 5e-6  # seconds of frontend latency per prompt token (tokenization)
FRONTEND_SIGMA = 0.25  # lognormal sigma of the frontend latency's jitter
ITL_CV = 0.1  # coefficient of variation of each inter-token gap around the request's TPOT


def server_cost_model() -> dict[str, Any]:
    """The synthetic server's `cluster.cost_model`: the A100's stage parameters with slower
    GEMMs and decode attention, and host work in series."""
    base = stage_params_for(GPU)
    return {"kind": "stage", "gemm_compute_eff": base.gemm_compute_eff / 1.1,
            "gemm_weight_eff": base.gemm_weight_eff / 1.1,
            "attn_decode_eff_small": base.attn_decode_eff_small / 1.2,
            "attn_decode_eff_large": base.attn_decode_eff_large / 1.2,
            "cpu_step_s": 4e-3, "cpu_per_seq_s": 3e-5, "cpu_overlapped": False}


def lengths(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths (tokens): lognormal, clipped to Llama-2's 4,096 context."""
    prompt = np.clip(np.rint(rng.lognormal(np.log(250), 1.0, n)), 4, 3000).astype(int)
    output = np.clip(np.rint(rng.lognormal(np.log(150), 0.8, n)), 2, 1000).astype(int)
    return prompt, output


def iteration_ends(steps: pd.DataFrame) -> np.ndarray:
    """Every engine iteration's end (seconds), a step's iterations evenly over its duration."""
    k = steps["num_iterations"].to_numpy()
    frac = (np.arange(k.sum()) - np.repeat(np.cumsum(k) - k, k) + 1) / np.repeat(k, k)
    return np.sort(np.repeat(steps["start_s"].to_numpy(), k)
                   + frac * np.repeat(steps["duration_s"].to_numpy(), k))


def itl_lists(records: pd.DataFrame, ends: np.ndarray, rng: np.random.Generator
              ) -> list[list[float]]:
    """Per request, its output - 1 inter-token gaps (seconds): the engine iterations between its
    first token and its finish (a step with a prefill in it is a long gap), resampled to its
    token count, jittered (gamma, CV ITL_CV) and scaled back to its decode time."""
    shape = 1.0 / ITL_CV ** 2
    out = []
    for first, last, n in zip(records["first_token_s"], records["finish_s"],
                              records["output_tokens"]):
        if n < 2:
            out.append([])
            continue
        times = np.concatenate(([first], ends[(ends > first) & (ends <= last)]))
        if times[-1] < last:
            times = np.append(times, last)
        at = np.interp(np.linspace(0, times.size - 1, int(n)), np.arange(times.size), times)
        gaps = np.diff(at) * rng.gamma(shape, 1.0 / shape, int(n) - 1)
        out.append([float(g) for g in gaps * ((last - first) / gaps.sum())])
    return out


def synth_result(rate: float, num_prompts: int, seed: int,
                 start_times: bool = True) -> dict[str, Any]:
    """The detailed result dict of `num_prompts` requests sent at `rate` req/s."""
    if not 0 < rate < np.inf:
        raise ConfigError("--rate", rate, "must be a finite number > 0 (req/s)")
    if num_prompts < 2:
        raise ConfigError("--num-prompts", num_prompts, "must be an int >= 2")
    rng = np.random.default_rng(seed)
    prompt, output = lengths(num_prompts, rng)
    sent = send_schedule("vllm", num_prompts, rate, 1.0, seed + 1)
    trace = pd.DataFrame({"arrival_s": sent, "prompt_tokens": prompt, "output_tokens": output})
    run = replay_run(trace, ClusterSpec(model=MODEL, gpu=GPU, cost_model=server_cost_model()),
                     policy_factory(SERVER_POLICY, None))
    rec = run.records
    frontend = (FRONTEND_FIXED_S + FRONTEND_PER_TOKEN_S * prompt) * rng.lognormal(
        0.0, FRONTEND_SIGMA, num_prompts)
    ttft = rec["ttft_s"].to_numpy() + frontend
    itls = itl_lists(rec, iteration_ends(run.steps), rng)
    latency = ttft + np.array([sum(g) for g in itls])
    data: dict[str, Any] = {
        "date": "20261201-120000", "endpoint_type": "openai", "backend": "vllm",
        "label": None, "model_id": "meta-llama/Llama-2-7b-hf",
        "tokenizer_id": "meta-llama/Llama-2-7b-hf", "num_prompts": num_prompts,
        "request_rate": rate, "burstiness": 1.0, "max_concurrency": None,
        "duration": float(np.max(sent + latency) - sent.min()), "completed": num_prompts,
        "failed": 0, "input_lens": prompt.tolist(), "output_lens": output.tolist(),
        "ttfts": ttft.tolist(), "itls": itls, "latencies": latency.tolist(),
        "generated_texts": [""] * num_prompts, "errors": [""] * num_prompts}
    if start_times:
        data["start_times"] = (1000.0 + sent).tolist()  # time.perf_counter()-like
    return data


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.bench.synth",
                                description="Write a synthetic vLLM detailed bench result.")
    p.add_argument("--out", required=True, help="the JSON file to write")
    p.add_argument("--rate", type=float, default=4.0, help="request rate (req/s)")
    p.add_argument("--num-prompts", type=int, default=400, help="requests")
    p.add_argument("--seed", type=int, default=0, help="seed of every draw")
    p.add_argument("--no-start-times", action="store_true",
                   help="leave out start_times (older vLLM): arrivals are then redrawn")
    args = p.parse_args(argv)
    try:
        data = synth_result(args.rate, args.num_prompts, args.seed, not args.no_start_times)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    Path(args.out).write_text(json.dumps(data) + "\n")
    print(f"-> {args.out}: {args.num_prompts} requests at {args.rate:g} req/s (synthetic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
