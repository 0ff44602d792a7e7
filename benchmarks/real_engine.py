"""Benchmark the real engine: decode step time at a few batch sizes, and prefill throughput.

    python -m benchmarks.real_engine --model llama-2-7b --device cuda [--dtype bf16]
        [--batches 1 8 64] [--context 512] [--prefill-tokens 2048] [--reps 10] [--gpu H200]
        [--weights DIR] [--attention auto] [--no-cuda-graphs] [--out results/bench.json]

Decode: a batch of requests with `--context` cached tokens (reserved, not computed) runs one
Step of `--reps + 1` decode iterations; the median of the later iterations is the step time.
Mixed: 1 and 16 decode rows beside a 64-token prefill chunk, all after `--context` cached
tokens, median of `--reps` one-iteration Steps (replayed from a mixed graph on a GPU).
Prefill: one request of `--prefill-tokens` tokens, median of `--reps` runs, as tokens/s.
On a GPU each number is set against its physical bound (sim.hardware.gpus's peaks for the GPU):
decode reads every weight and the batch's KV once per step (bytes / HBM bandwidth); prefill
does 2 FLOPs per weight per token plus causal attention (FLOPs / peak tensor FLOP/s).
The ratio bound / measured is the fraction of the hardware's peak the engine achieves. The engine
is the default one (paged attention, CUDA-graph decodes on a GPU); `--no-cuda-graphs` and
`--attention sdpa` measure the eager engine against it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.core.executor import Step  # noqa: E402
from sim.util.errors import ConfigError, check_positive  # noqa: E402


MIXED_CHUNK = 64  # tokens: the prefill chunk of the mixed-step rows


def decode_step_s(ex: Any, batch: int, context: int, reps: int, first_id: int) -> float:
    """Median seconds of a decode iteration of `batch` requests at `context` cached tokens."""
    ids = tuple(range(first_id, first_id + batch))
    for rid in ids:
        ex.reserve_placeholder(rid, context)
    res = ex.execute(Step(0, ids, (1,) * batch, (context,) * batch, (True,) * batch,
                          num_iterations=reps + 1))
    ex.release(ids)
    return float(np.median(np.diff(res.iteration_ends_s)))


def prefill_s(ex: Any, tokens: int, reps: int, first_id: int) -> float:
    """Median seconds of a one-request prefill of `tokens` tokens (after one warm-up run)."""
    times = []
    for rep in range(reps + 1):
        res = ex.execute(Step(0, (first_id + rep,), (tokens,), (0,), (True,)))
        ex.release((first_id + rep,))
        times.append(res.duration_s)
    return float(np.median(times[1:]))


def mixed_step_s(ex: Any, decodes: int, chunk: int, context: int, reps: int,
                 first_id: int) -> float:
    """Median seconds of an iteration holding `decodes` decode rows and one prefill chunk of
    `chunk` tokens, all after `context` cached tokens (a chunked-prefill scheduler's step)."""
    ids = tuple(range(first_id, first_id + decodes))
    for rid in ids:
        ex.reserve_placeholder(rid, context)
    times = []
    for rep in range(reps + 1):
        cid = first_id + decodes + rep
        ex.reserve_placeholder(cid, context)
        res = ex.execute(Step(0, ids + (cid,), (1,) * decodes + (chunk,),
                              (context + rep,) * decodes + (context,), (True,) * (decodes + 1)))
        ex.release((cid,))
        times.append(res.duration_s)
    ex.release(ids)
    return float(np.median(times[1:]))


def weight_bytes_read(ex: Any) -> int:
    """Bytes of weights a decode step reads: everything but the embedding table's unused rows."""
    total = sum(p.numel() * p.element_size() for p in ex.model.parameters())
    if not ex.config.spec.tie_word_embeddings:
        emb = ex.model.model.embed_tokens.weight
        total -= emb.numel() * emb.element_size()
    return total


def bounds(ex: Any, gpu_name: str | None, batch: int, context: int,
           prefill_tokens: int) -> dict[str, float]:
    """Physical lower bounds (seconds) of a decode step and of a prefill, on the GPU."""
    import torch

    from sim.hardware.gpus import get_gpu

    gpu = get_gpu(gpu_name or torch.cuda.get_device_name(ex.device))
    s = ex.config.spec
    elem = torch.empty((), dtype=ex.dtype).element_size()
    kv_per_token = 2 * s.num_layers * s.num_kv_heads * s.head_dim * elem
    decode_bytes = weight_bytes_read(ex) + batch * (context + 1) * kv_per_token
    dense = s.num_layers * s.num_dense_params_per_layer
    attn = 4 * s.num_layers * s.num_attention_heads * s.head_dim * prefill_tokens ** 2 / 2
    flops = 2 * dense * prefill_tokens + 2 * s.hidden_size * s.vocab_size + attn
    return {"decode_s": decode_bytes / gpu.hbm_bandwidth,
            "prefill_s": flops / gpu.peak_tensor_flops, "gpu": gpu.name}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from real.executor import TorchExecutor
    from real.memory import resolve_device

    device = resolve_device(args.device)
    need = (max(args.batches) * (args.context + args.reps + 2) + args.prefill_tokens + 1024
            + 18 * (args.context + MIXED_CHUNK + args.reps + 2))
    kv = args.kv_tokens or (need if device.type == "cpu" else None)
    ex = TorchExecutor(args.model, str(device), args.dtype, kv_tokens=kv, weights=args.weights,
                       attention=args.attention, num_threads=args.threads,
                       cuda_graphs=args.cuda_graphs)
    out: dict[str, Any] = {"engine": ex.name, "attention_backend": ex.attention_backend,
                           "cuda_graphs": ex.cuda_graphs, "context": args.context,
                           "decode": [], "prefill": {}}
    first_id = 1
    for b in args.batches:
        secs = decode_step_s(ex, b, args.context, args.reps, first_id)
        first_id += b
        row: dict[str, Any] = {"batch": b, "step_s": secs, "tokens_per_s": b / secs}
        if device.type == "cuda":
            bound = bounds(ex, args.gpu, b, args.context, args.prefill_tokens)
            row.update(bound_s=bound["decode_s"], fraction_of_bound=bound["decode_s"] / secs)
        out["decode"].append(row)
    out["mixed"] = []
    for b in (1, 16):
        secs = mixed_step_s(ex, b, MIXED_CHUNK, args.context, args.reps, first_id)
        first_id += b + args.reps + 1
        out["mixed"].append({"decodes": b, "chunk": MIXED_CHUNK, "step_s": secs})
    secs = prefill_s(ex, args.prefill_tokens, args.reps, first_id)
    out["prefill"] = {"tokens": args.prefill_tokens, "seconds": secs,
                      "tokens_per_s": args.prefill_tokens / secs}
    if device.type == "cuda":
        bound = bounds(ex, args.gpu, 1, args.context, args.prefill_tokens)
        out["prefill"].update(bound_s=bound["prefill_s"],
                              fraction_of_bound=bound["prefill_s"] / secs)
        out["gpu"] = bound["gpu"]
    return out


def format_result(res: dict[str, Any]) -> str:
    graphs = ", CUDA graphs" if res.get("cuda_graphs") else ""
    lines = [f"{res['engine']}{graphs}, decode at {res['context']} cached tokens per request:"]
    for row in res["decode"]:
        frac = f", {row['fraction_of_bound']:.0%} of the HBM bound" if "bound_s" in row else ""
        lines.append(f"  batch {row['batch']:>4}: {row['step_s'] * 1e3:8.2f} ms/step, "
                     f"{row['tokens_per_s']:10.1f} tok/s{frac}")
    for row in res.get("mixed", []):
        lines.append(f"  {row['decodes']:>3} decodes + a {row['chunk']}-token chunk: "
                     f"{row['step_s'] * 1e3:8.2f} ms/step")
    p = res["prefill"]
    frac = f", {p['fraction_of_bound']:.0%} of the FLOP bound" if "bound_s" in p else ""
    lines.append(f"  prefill {p['tokens']} tokens: {p['seconds'] * 1e3:.2f} ms, "
                 f"{p['tokens_per_s']:.0f} tok/s{frac}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.real_engine",
                                description="Decode step time and prefill throughput.")
    p.add_argument("--model", default="tiny")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--context", type=int, default=512, help="cached tokens per decode request")
    p.add_argument("--prefill-tokens", type=int, default=2048)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--gpu", default=None, help="sim.hardware.gpus GPU (default: the device's name)")
    p.add_argument("--weights", default=None, help="HF safetensors checkpoint folder")
    p.add_argument("--kv-tokens", type=int, default=None)
    p.add_argument("--attention", default="auto")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false",
                   help="run decode iterations eagerly (the launch-bound engine)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        for flag in ("context", "prefill_tokens", "reps"):
            check_positive(f"--{flag.replace('_', '-')}", getattr(args, flag))
        for batch in args.batches:
            check_positive("--batches", batch)
        res = run(args)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(format_result(res))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
