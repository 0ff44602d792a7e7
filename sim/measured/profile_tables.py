"""Measured profiles, normalised: Vidur's per-operator tables and real.profile's step rows.

Accepted inputs (`load_profiles(PATH, model=..., gpu=...)`):
  * Vidur's public layout: PATH/compute/<gpu>/<org>/<model>/{mlp,attention}.csv and
    PATH/network/<topology>/{all_reduce,send_recv}.csv (topology named <gpu>_..., e.g. a100_dgx);
  * the shared data's layout, the same without `compute/`: PATH/<gpu>/<org>/<model>/... and
    PATH/<gpu>/network/{all_reduce,send_recv}.csv; PATH may also be one <gpu> or model folder;
    `attention_sample.csv` is read where no `attention.csv` is;
  * a CSV written by `python -m real.profile` (rows of `sim.measured.calibrated.FEATURES` + measured
    `seconds`) with its sidecar JSON.
Everything lands in one `ProfileTables` in seconds. Errors name the file, column and value
(sim/measured/profile_csv.py; unknown op columns are warned about and ignored, other unknown columns are
ignored). A model or GPU absent from the profiles is a ConfigError naming those present.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np
import pandas as pd

from sim.measured.profile_csv import (MS, bool_column, integer_column, median_by, numeric_column,
                             read_profile_csv, require_columns, stat_column, warn_unknown_ops)
from sim.measured.profile_layout import ProfileFiles, locate_profiles
from sim.util.errors import ConfigError, TraceError

# ops of one layer outside attention (Vidur's mlp.csv), summed into dense seconds
DENSE_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
EMBED_OP = "emb"  # the embedding lookup, once per step (kept apart, not in dense seconds)
ATTN_KERNELS = ("attn_prefill", "attn_decode", "attn")  # attention kernel ops ("attn": sample)
ATTN_EXTRA_OPS = ("attn_kv_cache_save", "attn_input_reshape", "attn_output_reshape")
BACKEND_COLUMN = "attention_backend"  # Vidur's attention.csv names its kernel (FLASHINFER, ...)
# Backends whose profiled prefill KV write is not the KV write of a serving engine: FlashInfer
# 0.1's append_paged_kv_cache ran a prefill's tokens one after another (Vidur's Llama-3-8B A100
# rows: 0.55 us per token at TP 1 and TP 4 alike, 2.26 ms for 4,096 tokens, more than the
# attention kernel; flashinfer-ai/flashinfer PR #583, "its performance is really bad for
# prefill", fixed upstream). Their prefill rows are the kernel without it; decode rows keep it.
SLOW_PREFILL_KV_SAVE = ("FLASHINFER",)
NETWORK_OPS = ("all_reduce", "send_recv")
DENSE_COLUMNS = ("num_tokens", "tp", "seconds", "emb_s")
ATTENTION_COLUMNS = ("tp", "is_prefill", "batch_size", "chunk_tokens", "kv_tokens", "seconds")
NETWORK_COLUMNS = ("collective", "num_workers", "size_bytes", "seconds")


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=np.float64) for c in columns})


@dataclass(frozen=True)
class ProfileTables:
    """One deployment's measured profile, normalised; every time in seconds on one GPU."""

    source: str  # the directory or CSV read
    gpu: str  # GPU as the profile names it (Vidur folder, or real.profile's device name)
    model: str  # model as the profile names it (org/name folder, or the profiled spec's name)
    dense: pd.DataFrame = field(default_factory=lambda: _empty(DENSE_COLUMNS))  # one layer
    # outside attention by (num_tokens, tp): seconds = sum of DENSE_OPS, emb_s, <op>_s per op
    attention: pd.DataFrame = field(default_factory=lambda: _empty(ATTENTION_COLUMNS))  # one
    # layer's attention by (tp, is_prefill, batch_size, chunk_tokens, kv_tokens): seconds
    attention_backend: str = ""  # the attention kernel the attention table names (Vidur's
    # attention_backend, e.g. FLASHINFER; "" when it names none)
    network: pd.DataFrame = field(default_factory=lambda: _empty(NETWORK_COLUMNS))  # NCCL
    # collectives inside one node by (collective, num_workers, size_bytes): seconds
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)  # real.profile whole-step rows
    meta: Mapping[str, Any] = field(default_factory=dict)  # real.profile's sidecar JSON

    def __post_init__(self) -> None:
        for name, cols in (("dense", DENSE_COLUMNS), ("attention", ATTENTION_COLUMNS),
                           ("network", NETWORK_COLUMNS)):
            missing = [c for c in cols if c not in getattr(self, name).columns]
            if missing:
                raise ConfigError(f"ProfileTables.{name}", missing, "missing columns")
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    @property
    def tensor_parallel_degrees(self) -> tuple[int, ...]:
        """TP degrees the dense table covers."""
        return tuple(sorted(int(t) for t in self.dense["tp"].unique()))


def read_dense(path: Path) -> pd.DataFrame:
    """mlp.csv -> DENSE_COLUMNS + <op>_s per op, median of repeated (num_tokens, tp) rows."""
    frame = read_profile_csv(path)
    need = [stat_column(op) for op in DENSE_OPS]
    require_columns(frame, ["num_tokens", "num_tensor_parallel_workers", *need], path, "op")
    warn_unknown_ops(frame, (*DENSE_OPS, EMBED_OP), path)
    out = pd.DataFrame({"num_tokens": integer_column(frame, "num_tokens", path),
                        "tp": integer_column(frame, "num_tensor_parallel_workers", path)})
    for op in DENSE_OPS:
        out[f"{op}_s"] = numeric_column(frame, stat_column(op), path) * MS
    emb = stat_column(EMBED_OP)
    out["emb_s"] = numeric_column(frame, emb, path) * MS if emb in frame.columns else np.nan
    out["seconds"] = out[[f"{op}_s" for op in DENSE_OPS]].sum(axis=1)
    if (out["num_tokens"] < 1).any() or (out["tp"] < 1).any():
        i = int(np.flatnonzero((out["num_tokens"] < 1) | (out["tp"] < 1))[0])
        raise TraceError(str(path), "num_tokens and num_tensor_parallel_workers must be >= 1",
                         row=i + 2, field="num_tokens", value=int(out["num_tokens"].iloc[i]))
    return median_by(out, ["tp", "num_tokens"])


def _backends(frame: pd.DataFrame) -> np.ndarray:
    """Each row's attention backend, upper case without Vidur's `AttentionBackend.` ("" when
    the table has no such column)."""
    if BACKEND_COLUMN not in frame.columns:
        return np.full(len(frame), "", dtype=object)
    return np.array([str(v).strip().rsplit(".", 1)[-1].upper() if isinstance(v, str) else ""
                     for v in frame[BACKEND_COLUMN].tolist()], dtype=object)


def _attention_seconds(frame: pd.DataFrame, path: Path, is_prefill: np.ndarray,
                       backends: np.ndarray) -> np.ndarray:
    """Kernel (+ KV save and reshapes where profiled; not a SLOW_PREFILL_KV_SAVE backend's
    prefill KV save) milliseconds -> seconds, per row."""
    if stat_column("attn_prefill") in frame.columns or stat_column("attn_decode") in frame:
        cols = (stat_column("attn_prefill"), stat_column("attn_decode"))
        require_columns(frame, cols, path, "attention op")
        pre = numeric_column(frame, cols[0], path, allow_nan=True, rows=is_prefill)
        dec = numeric_column(frame, cols[1], path, allow_nan=True, rows=~is_prefill)
        kernel = np.where(is_prefill, pre, dec)
    else:
        col = next((c for c in (stat_column("attn"), stat_column("attn", "median_ms"))
                    if c in frame.columns), stat_column("attn_prefill"))
        require_columns(frame, [col], path, "attention op")
        kernel = numeric_column(frame, col, path)
    slow_save = is_prefill & np.isin(backends, SLOW_PREFILL_KV_SAVE)
    for op in ATTN_EXTRA_OPS:
        if stat_column(op) in frame.columns:
            extra = np.nan_to_num(numeric_column(frame, stat_column(op), path, allow_nan=True))
            if op == "attn_kv_cache_save":
                extra = np.where(slow_save, 0.0, extra)
            kernel = kernel + extra
    return kernel * MS


def read_attention(path: Path) -> pd.DataFrame:
    """attention.csv / attention_sample.csv -> ATTENTION_COLUMNS, median of repeated shapes."""
    return read_attention_backend(path)[0]


def read_attention_backend(path: Path) -> tuple[pd.DataFrame, str]:
    """`read_attention` and the backend the table names ("" for none; several joined by +)."""
    frame = read_profile_csv(path)
    require_columns(frame, ["is_prefill", "batch_size", "prefill_chunk_size", "kv_cache_size"],
                    path, "shape")
    warn_unknown_ops(frame, (*ATTN_KERNELS, *ATTN_EXTRA_OPS), path)
    is_prefill = bool_column(frame, "is_prefill", path)
    backends = _backends(frame)
    out = pd.DataFrame({
        "tp": integer_column(frame, "num_tensor_parallel_workers", path, default=1),
        "is_prefill": is_prefill,
        "batch_size": integer_column(frame, "batch_size", path),
        "chunk_tokens": integer_column(frame, "prefill_chunk_size", path),
        "kv_tokens": integer_column(frame, "kv_cache_size", path),
        "seconds": _attention_seconds(frame, path, is_prefill, backends)})
    bad = (out["batch_size"] < 1) | (out["is_prefill"] & (out["chunk_tokens"] < 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(str(path), "batch_size (and a prefill's prefill_chunk_size) must be "
                         ">= 1", row=i + 2, field="batch_size", value=out["batch_size"].iloc[i])
    named = "+".join(sorted({b for b in backends.tolist() if b}))
    return median_by(out, ["tp", "is_prefill", "batch_size", "chunk_tokens", "kv_tokens"]), named


def read_network(path: Path, collective: str) -> pd.DataFrame:
    """all_reduce.csv / send_recv.csv -> NETWORK_COLUMNS, intra-node rows only (devices_per_node
    == num_workers, where the column is present), median of repeated sizes."""
    frame = read_profile_csv(path)
    col = stat_column(collective)
    require_columns(frame, ["size", "num_workers", col], path, "collective")
    warn_unknown_ops(frame, NETWORK_OPS, path)
    workers = integer_column(frame, "num_workers", path)
    out = pd.DataFrame({"num_workers": workers,
                        "size_bytes": numeric_column(frame, "size", path),
                        "seconds": numeric_column(frame, col, path) * MS})
    if "devices_per_node" in frame.columns:
        out = out[integer_column(frame, "devices_per_node", path) == workers]
    out = median_by(out, ["num_workers", "size_bytes"])
    out.insert(0, "collective", collective)
    return out


def _read_network_dir(folder: Path | None) -> pd.DataFrame:
    frames = [read_network(folder / f"{op}.csv", op) for op in NETWORK_OPS
              if folder is not None and (folder / f"{op}.csv").is_file()]
    return pd.concat(frames, ignore_index=True) if frames else _empty(NETWORK_COLUMNS)


def _from_files(files: ProfileFiles) -> ProfileTables:
    attention, backend = (read_attention_backend(files.attention) if files.attention
                          else (_empty(ATTENTION_COLUMNS), ""))
    return ProfileTables(str(files.root), files.gpu, files.model, dense=read_dense(files.mlp),
                         attention=attention, attention_backend=backend,
                         network=_read_network_dir(files.network))


def read_real_profile(path: Path, model: str | None = None) -> ProfileTables:
    """A real.profile CSV (+ sidecar JSON, optional) as whole-step rows."""
    from sim.measured.calibrated import FEATURES  # torch-free

    frame = read_profile_csv(path)
    require_columns(frame, ["seconds", *FEATURES], path, "real.profile")
    steps = pd.DataFrame({"kind": frame["kind"].astype(str) if "kind" in frame else "step"})
    for col in (*FEATURES, "seconds"):
        steps[col] = numeric_column(frame, col, path)
    sidecar = path.with_suffix(".json")
    meta: dict[str, Any] = {}
    if sidecar.is_file():
        try:
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(str(sidecar), f"not valid JSON: {exc}") from None
    profiled = str((meta.get("model") or {}).get("name", path.stem))
    if model is not None and model.lower() not in (profiled.lower(), path.stem.lower()):
        raise ConfigError("model", model, f"not in profile {path}; it profiled {profiled}")
    return ProfileTables(str(path), str(meta.get("device_name", meta.get("device", "unknown"))),
                         profiled, steps=steps, meta=meta)


def load_profiles(path: str | Path, model: str | None = None, gpu: str | None = None,
                  topology: str | None = None) -> ProfileTables:
    """The profile of `model` on `gpu` under `path` (see the module doc for layouts)."""
    p = Path(path)
    if p.is_file():
        return read_real_profile(p, model)
    if not p.is_dir():
        raise ConfigError("profiles", str(path), "no such file or directory")
    return _from_files(locate_profiles(p, model, gpu, topology))
