"""Time a grid of step shapes on the real engine and write them as a profile CSV.

    python -m real.profile --model llama-2-7b --device cuda [--dtype bf16] [--out PROFILE.csv]
                           [--quick] [--reps 5] [--weights DIR] [--kv-tokens N]

Shapes: prefills of one request and of padded batches, prefill chunks after cached context,
decode batches x context lengths, decodes mixed with a prefill chunk, and the shapes
continuous-batching schedulers make: decodes over very different contexts, several prefill
chunks after context beside decodes, and decodes the host waits for after every iteration (a
Step that watches for arrivals). Each shape runs as a Step through `TorchExecutor.execute` (the
code path a replay runs); contexts are reserved in the KV cache without being computed. A row
holds an iteration's features (`sim.measured.calibrated.FEATURES`, the decode rows' own KV `decode_kv`,
`synced`) and the median measured seconds over `--reps` runs after a warm-up run (whose first
iteration is kept as `seconds_first`, with the attention shapes it ran for the first time);
decode shapes give two rows, the step's first iteration and its later ones. A sidecar
PROFILE.json records the engine (model, device, dtype, attention backend, KV capacity, block
size) and the device's matmul FLOP/s and copy bandwidth.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import pandas as pd

from sim.core.executor import Step
from sim.cost.engine_time import step_iteration_features
from sim.measured.calibrated import FEATURES, step_features
from sim.util.errors import ConfigError, check_positive

if TYPE_CHECKING:
    from real.executor import TorchExecutor

CPU_KV_TOKENS = 65536  # default KV budget on CPU, tokens
DECODE_ITERATIONS = 4  # iterations of each timed decode Step
SYNC_NEVER_S = 1e9  # seconds: an until_s no step reaches, so the engine syncs every iteration


@dataclass(frozen=True)
class Shape:
    """One profiled step: a label and its (new tokens, context tokens) chunks."""

    kind: str  # prefill | batch_prefill | chunked | decode | decode_synced | mixed | hetero |
    # multi_chunk | decode_lopsided
    # | multi_chunk
    chunks: tuple[tuple[int, int], ...]  # (num_new_tokens, num_context_tokens) per request
    synced: bool = False  # the host waits for each iteration's end (as a watched Step does)


def _spread(count: int, low: int, high: int) -> tuple[int, ...]:
    """`count` contexts spread evenly over [low, high] tokens (heterogeneous batches)."""
    return tuple(int(x) for x in np.linspace(low, high, count))


def _scheduler_shapes(quick: bool) -> list[Shape]:
    """Shapes continuous-batching schedulers make: decodes over very different contexts, and
    several prefill chunks after cached context beside decodes (chunked prefill)."""
    hetero = ((8,), (2048,)) if quick else ((4, 16, 64), (512, 2048))
    out = [Shape("hetero", tuple((1, c) for c in _spread(b, 16, top)))
           for b, top in itertools.product(*hetero)]
    chunks = ((2, 3), (64,)) if quick else ((2, 4), (64, 256))
    for n, size in itertools.product(*chunks):
        rows = tuple((size, c) for c in _spread(n, 0, 1024))
        out.append(Shape("multi_chunk", rows + tuple((1, c) for c in _spread(8, 64, 1024))))
    synced = ((1, 16), (128,)) if quick else ((1, 8, 64), (128, 2048))
    out += [Shape("decode_synced", ((1, c),) * b, synced=True)
            for b, c in itertools.product(*synced)]
    return out if quick else out + _split_kv_shapes()


def _split_kv_shapes() -> list[Shape]:
    """Decode batches in each split-KV regime of the paged kernel (few rows: several splits
    per row; a handful: one split, the GPU not filled), even and with one long row among short
    ones (the iteration waits for the longest split), and a chunk after cached context beside
    long decodes. The H200 replays showed these shapes mispriced by a grid without them."""
    out = [Shape("decode", ((1, c),) * b) for b, c in itertools.product((3, 6), (512, 2048))]
    out += [Shape("decode_lopsided", ((1, top),) + ((1, 64),) * (b - 1))
            for b, top in itertools.product((2, 3, 6, 12), (1024, 3584))]
    out += [Shape("mixed", ((1, 1024),) * b + ((512, c),))
            for b, c in itertools.product((2, 8), (512, 2048))]
    return out


def profile_grid(quick: bool, kv_capacity: int, max_len: int, block_size: int = 1
                 ) -> list[Shape]:
    """The shapes to time, those that fit the KV cache (in whole blocks, decode iterations
    included) and the model's context."""
    prefill = (8, 32, 128, 512) if quick else (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
    batch = ((2, 8), (32, 128)) if quick else ((2, 4, 8, 16), (16, 64, 256, 1024))
    chunked = ((64,), (256,)) if quick else ((64, 512), (512, 2048))
    decode = ((1, 4, 16, 64), (16, 128, 512)) if quick else \
        ((1, 2, 4, 8, 16, 32, 64, 128, 256), (16, 128, 512, 2048))
    mixed = ((4, 16), (128,), (64,)) if quick else ((4, 16, 64), (128, 1024), (64, 512))
    shapes = [Shape("prefill", ((p, 0),)) for p in prefill]
    shapes += [Shape("batch_prefill", ((p, 0),) * b) for b, p in itertools.product(*batch)]
    shapes += [Shape("chunked", ((p, c),)) for p, c in itertools.product(*chunked)]
    shapes += [Shape("decode", ((1, c),) * b) for b, c in itertools.product(*decode)]
    shapes += [Shape("mixed", ((1, c),) * b + ((p, 0),))
               for b, c, p in itertools.product(*mixed)]
    shapes += _scheduler_shapes(quick)

    def blocks(s: Shape) -> int:
        return sum(-(-(n + c + DECODE_ITERATIONS) // block_size) for n, c in s.chunks)

    return [s for s in shapes if blocks(s) * block_size <= kv_capacity
            and max(n + c for n, c in s.chunks) <= max_len]


def shape_step(shape: Shape, first_id: int) -> Step:
    """The Step that times a shape on fresh requests `first_id`, ... Decode shapes run
    DECODE_ITERATIONS iterations: the first pays the step's host work, the later ones are the
    decode iterations a multi-iteration Step is made of."""
    iterations = DECODE_ITERATIONS if shape.kind.startswith("decode") else 1
    ids = tuple(range(first_id, first_id + len(shape.chunks)))
    return Step(0, ids, tuple(n for n, _ in shape.chunks), tuple(c for _, c in shape.chunks),
                (True,) * len(ids), num_iterations=iterations)


def time_shape(executor: TorchExecutor, shape: Shape, first_id: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of each iteration of one run of a shape, and the attention shapes each ran for
    the first time on this engine (kernel plans built then)."""
    step = shape_step(shape, first_id)
    for rid, (_, c) in zip(step.request_ids, shape.chunks):
        if c:
            executor.reserve_placeholder(rid, c)
    new_shapes = executor.shapes.new_per_iteration(step, step.num_iterations)
    result = executor.execute(step, until_s=SYNC_NEVER_S if shape.synced else math.inf)
    executor.release(step.request_ids)
    return np.diff(result.iteration_ends_s, prepend=0.0), new_shapes


def _row(kind: str, features: np.ndarray, decode_kv: float, synced: bool, secs: list[float],
         reps: int, first: tuple[float, float] | None) -> dict[str, Any]:
    """A profile row: features, measured seconds (median / min / std over the timed passes),
    and for first iterations the warm-up pass's seconds and first-run shapes."""
    return {"kind": kind, **dict(zip(FEATURES, features.tolist())), "decode_kv": decode_kv,
            "synced": float(synced),
            "seconds": float(np.median(secs)), "seconds_min": float(np.min(secs)),
            "seconds_std": float(np.std(secs)), "reps": reps,
            "seconds_first": first[0] if first else float("nan"),
            "new_shapes_first": first[1] if first else float("nan")}


def profile_executor(executor: TorchExecutor, quick: bool = False, reps: int = 3
                     ) -> pd.DataFrame:
    """One row per shape (two for decodes: first and later iterations): its features, and the
    median / min / std of the measured seconds. The grid is timed in `reps` interleaved passes
    after a warm-up pass, so a burst of load on the machine does not hit every run of a shape;
    the warm-up pass is kept as `seconds_first` with the shapes it ran for the first time
    (`new_shapes_first`), which measures what a first run of a shape costs the engine."""
    check_positive("reps", reps)
    executor.reset()
    shapes = profile_grid(quick, executor.kv_capacity_tokens,
                          executor.config.spec.max_position_embeddings, executor.block_size)
    runs: list[list[np.ndarray]] = [[] for _ in shapes]
    first: list[tuple[float, float]] = []
    next_id = 1 << 40  # far from any trace's request ids
    for rep in range(reps + 1):
        for i, shape in enumerate(shapes):
            times, new = time_shape(executor, shape, next_id)
            next_id += len(shape.chunks)
            if rep:
                runs[i].append(times)
            else:
                first.append((float(times[0]), float(new[0])))
    rows = []
    for shape, timed, warm in zip(shapes, runs, first):
        step = shape_step(shape, 0)
        k = step.num_iterations
        feats = step_features(step)
        kv = step_iteration_features(step, k).kv_paged
        rows.append(_row(shape.kind, feats[0], float(kv[0]), shape.synced,
                         [float(t[0]) for t in timed], reps, warm))
        if k > 1:
            rows.append(_row(f"{shape.kind}_later", feats[1], float(kv[1]), shape.synced,
                             [float(np.median(t[1:])) for t in timed], reps, None))
    executor.reset()
    return pd.DataFrame(rows)


def measure_peaks(device: Any, dtype: Any) -> dict[str, float]:
    """Measured matmul FLOP/s and copy bandwidth (bytes/s) of the device, in `dtype`."""
    import torch

    cuda = device.type == "cuda"
    n = 8192 if cuda else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    buf = torch.empty(256 * 2**20 if cuda else 32 * 2**20, dtype=torch.uint8, device=device)

    def best(fn: Callable[[], object], reps: int = 5) -> float:
        times = []
        for _ in range(reps + 1):
            if cuda:
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            fn()
            if cuda:
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - t)
        return min(times[1:])

    flops = 2 * n**3 / best(lambda: a @ a)
    bandwidth = 2 * buf.numel() / best(lambda: buf.clone())
    return {"peak_flops": float(flops), "peak_bandwidth": float(bandwidth)}


def profile_meta(executor: TorchExecutor) -> dict[str, Any]:
    """What a calibration needs to know about the profiled engine."""
    import dataclasses

    import torch

    from real.memory import dtype_name

    meta = {"model": dataclasses.asdict(executor.config.spec),
            "model_config": {k: v for k, v in dataclasses.asdict(executor.config).items()
                             if k != "spec"},
            "device": str(executor.device), "dtype": dtype_name(executor.dtype),
            "attention_backend": executor.attention_backend,
            "kv_capacity_tokens": executor.kv_capacity_tokens,
            "block_size": executor.block_size, "torch": torch.__version__,
            "cuda_graphs": executor.cuda_graphs, "max_graph_batch": executor.max_graph_batch,
            "max_graph_tokens": executor.max_graph_tokens,
            "num_sms": int(getattr(executor.backend, "num_sms", 0)),
            "device_name": torch.cuda.get_device_name(executor.device)
            if executor.device.type == "cuda" else "cpu",
            "num_threads": torch.get_num_threads()}
    meta.update(measure_peaks(executor.device, executor.dtype))
    return meta


def write_profile(frame: pd.DataFrame, meta: dict, path: str | Path) -> Path:
    """Write PROFILE.csv and its PROFILE.json sidecar; returns the CSV path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    path.with_suffix(".json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return path


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m real.profile", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="tiny", help="tiny, a built-in model or a config.json path")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", help="auto | fp32 | fp16 | bf16")
    p.add_argument("--out", default=None, help="CSV path (default results/profiles/...)")
    p.add_argument("--quick", action="store_true", help="a small grid (CPU tests)")
    p.add_argument("--reps", type=int, default=3, help="timed runs per shape")
    p.add_argument("--weights", default=None, help="HF safetensors checkpoint folder")
    p.add_argument("--kv-tokens", type=int, default=None, help="KV budget (required on CPU)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--attention", default="auto", help="auto | sdpa | torch_varlen | flash_attn")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--cpu-clock", default="wall", choices=("wall", "thread"),
                   help="CPU timing: wall clock, or this thread's CPU time (shared machines)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from real.executor import TorchExecutor
    from real.memory import resolve_device

    args = parse_args(argv)
    try:
        check_positive("--reps", args.reps)  # before the model is built
        device = resolve_device(args.device)
        kv = args.kv_tokens or (CPU_KV_TOKENS if device.type == "cpu" else None)
        ex = TorchExecutor(args.model, str(device), args.dtype, kv_tokens=kv,
                           gpu_memory_utilization=args.gpu_memory_utilization,
                           block_size=args.block_size, weights=args.weights, seed=args.seed,
                           attention=args.attention, num_threads=args.threads,
                           cpu_clock=args.cpu_clock)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    frame = profile_executor(ex, args.quick, args.reps)
    out = args.out or f"results/profiles/{ex.config.name}_{ex.device.type}.csv"
    path = write_profile(frame, profile_meta(ex), out)
    print(f"{len(frame)} shapes in {time.perf_counter() - start:.1f} s on {ex.name} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
