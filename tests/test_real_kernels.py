"""real.kernels: the torch references against straightforward definitions, and every Triton kernel,
run on CPU by triton's interpreter, against its reference.

The interpreter only takes effect when TRITON_INTERPRET=1 is set before triton itself is imported
(triton's own library functions, tl.sum and the like, are decorated at that import), and another
test module or torch may have imported triton first. So `test_kernels_under_the_triton_interpreter`
runs this file's `test_interpreted_*` tests in a child pytest started with TRITON_INTERPRET=1;
in this process they skip. The child patches three gaps of triton 3.6's interpreter for the length
of this module (`_patch_interpreter`). No test here needs a GPU or measures time.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from real.kernels import ops, reference  # noqa: E402
from real.kernels.schedule import choose_num_splits, prefill_tiles  # noqa: E402
from real.layers import RMSNorm, SwiGLU, apply_rope, rope_cos_sin  # noqa: E402

KERNEL_MODULES = ("attention_common", "norm", "rope_cache", "activation", "attention_decode",
                  "attention_prefill")  # import order: attention_common first
ATOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}  # attention outputs
INTERPRETER = os.environ.get("TRITON_INTERPRET") == "1"  # this process runs kernels on CPU
ROOT = Path(__file__).resolve().parents[1]  # the repository


# --------------------------------------------------------------------------- paged test data

@dataclass
class Paged:
    """Rows' keys / values scattered over a paged cache, unused slots NaN."""

    k_cache: torch.Tensor  # [num_blocks, block_size, kv_heads, head_dim]
    v_cache: torch.Tensor  # same layout as k_cache
    tables: torch.Tensor  # [rows, width] int32 block ids, padded with block 0 (all NaN)
    kv_lens: list[int]  # keys written per row, tokens


def make_paged(kv_lens: list[int], block_size: int, kv_heads: int, head_dim: int,
               dtype: torch.dtype, seed: int = 0) -> Paged:
    """Each row's blocks are a random set of ids (block 0 is never used: it pads the tables);
    positions past a row's length, and unused blocks, hold NaN, so reading them poisons."""
    gen = torch.Generator().manual_seed(seed)
    need = [-(-n // block_size) for n in kv_lens]
    ids = (torch.randperm(sum(need) + 3, generator=gen) + 1).tolist()
    shape = (sum(need) + 4, block_size, kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype)
    v_cache = torch.full(shape, float("nan"), dtype=dtype)
    tables = torch.zeros(len(kv_lens), max(need + [0]) + 1, dtype=torch.int32)
    for row, (n, nb) in enumerate(zip(kv_lens, need)):
        blocks = [ids.pop() for _ in range(nb)]
        tables[row, :nb] = torch.tensor(blocks, dtype=torch.int32)
        pos = torch.arange(n)
        blk, off = tables[row, pos // block_size].long(), pos % block_size
        k_cache[blk, off] = torch.randn(n, kv_heads, head_dim, generator=gen).to(dtype)
        v_cache[blk, off] = torch.randn(n, kv_heads, head_dim, generator=gen).to(dtype)
    return Paged(k_cache, v_cache, tables, list(kv_lens))


def row_kv(p: Paged, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row's keys and values [kv_len, kv_heads, head_dim], gathered token by token."""
    bs = p.k_cache.shape[1]
    pos = torch.arange(p.kv_lens[row])
    blk, off = p.tables[row, pos // bs].long(), pos % bs
    return p.k_cache[blk, off], p.v_cache[blk, off]


@dataclass
class DecodeCase:
    paged: Paged  # the rows' cache
    q: torch.Tensor  # [tokens, Hq, D], more tokens than rows
    seq_lens: torch.Tensor  # [rows] int32, 0 for the padding row
    query_index: torch.Tensor  # [rows] int64: each row's token in q
    scale: float  # softmax scale


def decode_case(block_size: int, dtype: torch.dtype, heads: tuple[int, int] = (4, 2),
                head_dim: int = 32, lens: tuple[int, ...] = (1, 37, 0, 70, 16)) -> DecodeCase:
    """Rows of various lengths (one a padding row, seq_len 0) reading tokens of a flat q."""
    paged = make_paged(list(lens), block_size, heads[1], head_dim, dtype)
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(len(lens) + 2, heads[0], head_dim, generator=gen).to(dtype)
    index = torch.randperm(len(lens) + 2, generator=gen)[: len(lens)]
    return DecodeCase(paged, q, torch.tensor(lens, dtype=torch.int32), index,
                      head_dim ** -0.5)


def decode_args(c: DecodeCase) -> tuple:
    return (c.q, c.paged.k_cache, c.paged.v_cache, c.paged.tables, c.seq_lens, c.query_index,
            c.scale)


@dataclass
class PrefillCase:
    paged: Paged  # the rows' cache: context and chunk keys written
    q: torch.Tensor  # [tokens, Hq, D]; tokens outside every chunk belong to no row
    q_start: torch.Tensor  # [rows] int32
    q_len: torch.Tensor  # [rows] int32
    context_len: torch.Tensor  # [rows] int32
    scale: float  # softmax scale


def prefill_case(block_size: int, dtype: torch.dtype, heads: tuple[int, int] = (4, 2),
                 head_dim: int = 32) -> PrefillCase:
    """Chunks after contexts of various lengths, one spanning several query tiles, one of a
    single token, with gap tokens (not in any chunk) between some of them."""
    q_len, ctx = [5, 1, 40, 3, 17], [0, 30, 7, 50, 16]
    gaps = [0, 2, 0, 1, 1]  # tokens before each chunk that belong to no row
    starts, t = [], 0
    for n, gap in zip(q_len, gaps):
        starts.append(t + gap)
        t += gap + n
    paged = make_paged([c + n for c, n in zip(ctx, q_len)], block_size, heads[1], head_dim,
                       dtype, seed=2)
    q = torch.randn(t + 1, heads[0], head_dim, generator=torch.Generator().manual_seed(3))
    i32 = torch.int32
    return PrefillCase(paged, q.to(dtype), torch.tensor(starts, dtype=i32),
                       torch.tensor(q_len, dtype=i32), torch.tensor(ctx, dtype=i32),
                       head_dim ** -0.5)


def prefill_args(c: PrefillCase) -> tuple:
    return (c.q, c.paged.k_cache, c.paged.v_cache, c.paged.tables, c.q_start, c.q_len,
            c.context_len, c.scale)


def chunk_tokens(c: PrefillCase) -> torch.Tensor:
    """Bool [tokens]: the token belongs to some row's chunk."""
    mask = torch.zeros(c.q.shape[0], dtype=torch.bool)
    for s, n in zip(c.q_start.tolist(), c.q_len.tolist()):
        mask[s: s + n] = True
    return mask


# --------------------------------------------------------------------------- references

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_add_rms_norm_reference_is_the_engine_rmsnorm_of_the_sum(dtype):
    norm = RMSNorm(48, 1e-5, dtype=dtype)
    with torch.no_grad():
        norm.weight.normal_()
    x, res = torch.randn(2, 5, 48).to(dtype), torch.randn(2, 5, 48).to(dtype)
    normed, new_res = reference.fused_add_rms_norm(x, res, norm.weight, 1e-5)
    assert torch.equal(new_res, x + res)
    assert torch.equal(normed, norm(x + res))
    normed, new_res = reference.fused_add_rms_norm(x, None, norm.weight, 1e-5)
    assert new_res is x and torch.equal(normed, norm(x))


def test_cos_sin_table_rows_are_the_engine_cos_sin():
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 16, 2).float() / 16))
    table = reference.cos_sin_table(inv_freq, 100)
    positions = torch.tensor([0, 7, 99])
    cos, sin = rope_cos_sin(inv_freq, positions, torch.float32)
    assert torch.equal(table[positions, :8].repeat(1, 2), cos[:, 0])
    assert torch.equal(table[positions, 8:].repeat(1, 2), sin[:, 0])


def rope_case(dtype: torch.dtype, block_size: int = 16):
    """Views of one fused qkv output, positions, a NaN cache and slots (two negative)."""
    tokens, hq, hkv, d = 6, 4, 2, 16
    gen = torch.Generator().manual_seed(4)
    qkv = torch.randn(tokens, (hq + 2 * hkv) * d, generator=gen).to(dtype)
    q, k, v = (t.view(tokens, -1, d) for t in qkv.split([hq * d, hkv * d, hkv * d], dim=-1))
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    positions = torch.tensor([0, 5, 17, 33, 2, 63])
    slots = torch.tensor([3, -1, 40, 3 * block_size + 1, 7, -5])
    cache = torch.full((4, block_size, hkv, d), float("nan"), dtype=dtype)
    return (q, k, v, positions, reference.cos_sin_table(inv_freq, 64), cache, cache.clone(),
            slots), inv_freq


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_reference_is_the_engine_rope_and_writes_only_nonnegative_slots(dtype):
    args, inv_freq = rope_case(dtype)
    q, k, v, positions, _, k_cache, v_cache, slots = args
    cos, sin = rope_cos_sin(inv_freq, positions, dtype)
    want_q, want_k = apply_rope(q.clone(), cos, sin), apply_rope(k.clone(), cos, sin)
    v_before = v.clone()
    reference.rope_and_cache(*args)
    assert torch.equal(q, want_q) and torch.equal(k, want_k) and torch.equal(v, v_before)
    flat_k, flat_v = k_cache.view(-1, *k.shape[1:]), v_cache.view(-1, *v.shape[1:])
    keep = slots >= 0
    assert torch.equal(flat_k[slots[keep]], want_k[keep])
    assert torch.equal(flat_v[slots[keep]], v[keep])
    written = torch.zeros(flat_k.shape[0], dtype=torch.bool)
    written[slots[keep]] = True
    assert flat_k[~written].isnan().all() and flat_v[~written].isnan().all()


def test_silu_and_mul_reference_is_the_engine_swiglu():
    mlp = SwiGLU(24, 40)
    x = torch.randn(5, 24)
    gate_up = torch.cat((mlp.gate_proj(x), mlp.up_proj(x)), dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(mlp.down_proj(reference.silu_and_mul(gate_up)), mlp(x))


def sdpa_decode(c: DecodeCase) -> torch.Tensor:
    """Straightforward decode attention: SDPA (fp32) over each row's gathered keys."""
    out = torch.zeros(len(c.paged.kv_lens), *c.q.shape[1:])
    for row, n in enumerate(c.paged.kv_lens):
        if n:
            k, v = (t.float().transpose(0, 1) for t in row_kv(c.paged, row))
            q = c.q[c.query_index[row]].float()[:, None, :]  # [Hq, 1, D]
            out[row] = F.scaled_dot_product_attention(q, k, v, scale=c.scale,
                                                      enable_gqa=True)[:, 0]
    return out


@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("heads", [(4, 2), (4, 4), (8, 1)])
def test_decode_reference_matches_sdpa_over_gathered_keys(block_size, heads):
    c = decode_case(block_size, torch.float32, heads)
    out = reference.paged_decode_attention(*decode_args(c))
    assert out.shape == (5, heads[0], 32)
    torch.testing.assert_close(out, sdpa_decode(c), atol=1e-5, rtol=1e-5)
    assert torch.equal(out[2], torch.zeros_like(out[2]))  # the padding row


def explicit_prefill(c: PrefillCase) -> torch.Tensor:
    """Straightforward chunked-prefill attention: fp64 masked softmax per row, per query."""
    out = torch.zeros(c.q.shape, dtype=torch.float64)
    rows = zip(c.q_start.tolist(), c.q_len.tolist(), c.context_len.tolist())
    for row, (s, n, ctx) in enumerate(rows):
        k, v = (t.double() for t in row_kv(c.paged, row))  # [ctx + n, Hkv, D]
        group = c.q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        for i in range(n):
            scores = torch.einsum("hd,khd->hk", c.q[s + i].double(), k[: ctx + i + 1])
            probs = torch.softmax(scores * c.scale, dim=-1)
            out[s + i] = torch.einsum("hk,khd->hd", probs, v[: ctx + i + 1])
    return out


@pytest.mark.parametrize("block_size", [16, 256])
@pytest.mark.parametrize("heads", [(4, 2), (4, 4)])
def test_prefill_reference_matches_an_explicit_causal_softmax(block_size, heads):
    c = prefill_case(block_size, torch.float32, heads)
    out = torch.full(c.q.shape, 7.0)
    reference.paged_prefill_attention(*prefill_args(c), out)
    inside = chunk_tokens(c)
    torch.testing.assert_close(out[inside].double(), explicit_prefill(c)[inside], atol=1e-5,
                               rtol=1e-5)
    assert (out[~inside] == 7.0).all()  # tokens of no chunk are not written


def test_references_match_the_engine_sdpa_backend_on_a_mixed_batch():
    from real.attention import BatchLayout
    from real.attn_sdpa import SdpaBackend

    num_new, num_ctx, bs = np.array([1, 6, 1, 9]), np.array([20, 0, 3, 11]), 4
    paged = make_paged((num_new + num_ctx).tolist(), bs, 2, 16, torch.float32)
    paged.k_cache.nan_to_num_(0.0), paged.v_cache.nan_to_num_(0.0)
    tables = [paged.tables[r, : -(-int(n) // bs)].long().numpy() for r, n in
              enumerate(num_new + num_ctx)]
    layout = BatchLayout(num_new, num_ctx, tables, bs)
    q = torch.randn(int(num_new.sum()), 4, 16)
    backend = SdpaBackend()
    want = backend.forward(q, paged.k_cache, paged.v_cache, backend.build(layout, q.device))
    starts, scale = torch.from_numpy(layout.starts), 16 ** -0.5
    dec, pre = torch.from_numpy(num_new == 1), torch.from_numpy(num_new > 1)
    got = torch.zeros_like(q)
    got[starts[dec]] = reference.paged_decode_attention(
        q, paged.k_cache, paged.v_cache, paged.tables[dec],
        torch.from_numpy(layout.kv_lens[dec]).int(), starts[dec], scale)
    reference.paged_prefill_attention(
        q, paged.k_cache, paged.v_cache, paged.tables[pre], starts[pre].int(),
        torch.from_numpy(num_new[pre]).int(), torch.from_numpy(num_ctx[pre]).int(), scale, got)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- host helpers

def test_prefill_tiles_cover_every_query_once_longest_first():
    rows, offsets = prefill_tiles(np.array([5, 0, 40, 16, 17]), 16)
    assert rows.dtype == np.int32 and offsets.dtype == np.int32
    tiles = sorted(zip(rows.tolist(), offsets.tolist()))
    assert tiles == [(0, 0), (2, 0), (2, 16), (2, 32), (3, 0), (4, 0), (4, 16)]
    assert offsets.tolist() == sorted(offsets.tolist(), reverse=True)
    empty_rows, empty_offsets = prefill_tiles(np.array([0, 0]), 64)
    assert len(empty_rows) == 0 and len(empty_offsets) == 0


def test_num_splits_fill_the_gpu_only_when_the_grid_does_not():
    assert choose_num_splits(256, 8, 32768, 132) == 1  # 2048 programs: already full
    assert choose_num_splits(17, 8, 32768, 132) == 1
    one = choose_num_splits(1, 8, 32768, 132)
    assert 8 * one >= 132 and one <= 64  # one long row: split until the SMs are busy
    assert choose_num_splits(1, 8, 300, 132) == 1  # too short to be worth splitting
    assert choose_num_splits(1, 8, 1024, 132) == 4  # at least 256 keys per split
    assert choose_num_splits(4, 8, 32768, 132) <= one


def test_ops_and_reference_import_neither_triton_nor_the_kernel_modules():
    root = Path(__file__).resolve().parents[1] / "real" / "kernels"
    for name in ("__init__", "ops", "reference", "schedule"):
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {f"{n.module}.{a.name}" for n in top if isinstance(n, ast.ImportFrom)
                  for a in n.names}
        assert not any("triton" in n for n in names), name
        assert not any(n.endswith(KERNEL_MODULES) for n in names), name


def test_ops_run_the_references_on_cpu_and_use_triton_is_scoped(monkeypatch):
    assert not ops.triton_available("cpu") and not ops.triton_available(torch.device("cpu"))
    c = decode_case(16, torch.float32)
    torch.testing.assert_close(ops.paged_decode_attention(*decode_args(c), 2),
                               reference.paged_decode_attention(*decode_args(c)))
    with ops.use_triton(False):
        x = torch.randn(3, 8)
        assert torch.equal(ops.silu_and_mul(x), reference.silu_and_mul(x))
    assert ops._FORCED.get() is None


# --------------------------------------------------------------------------- interpreter

def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round to nearest even, as GPUs (and torch) convert fp32 to bf16."""
    t = torch.from_numpy(np.array(values, dtype=np.float32))
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _patch_interpreter(mp: pytest.MonkeyPatch) -> None:
    """Make triton 3.6's interpreter behave as the GPU does where these kernels need it:
    numpy >= 2.4 refuses int() of the 1-element arrays it uses for scalars, breaking loops with
    runtime bounds (triton-lang/triton#9171, fixed after 3.6); it rounds fp32 -> bf16 toward
    zero; its tl.dot multiplies bf16 operands as their raw uint16 bits."""
    interp = pytest.importorskip("triton.runtime.interpreter")
    tl = pytest.importorskip("triton.language")
    builder = getattr(interp, "InterpreterBuilder", None)
    hooks = ("_patch_lang_tensor", "TensorHandle")
    if builder is None or not all(hasattr(interp, h) for h in hooks) or not all(
            hasattr(builder, m) for m in ("cast_impl", "create_dot")):
        pytest.skip("this triton's interpreter lacks the hooks these tests patch")
    patch_tensor, cast, dot = interp._patch_lang_tensor, builder.cast_impl, builder.create_dot

    def patched_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    def patched_cast(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interp.TensorHandle(_f32_to_bf16(src.data), tl.bfloat16)
        return cast(self, src, dst_type)

    def patched_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        a, b = (interp.TensorHandle(_bf16_to_f32(h.data), tl.float32)
                if h.dtype.scalar == tl.bfloat16 else h for h in (a, b))
        return dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    mp.setattr(interp, "_patch_lang_tensor", patched_tensor)
    mp.setattr(builder, "cast_impl", patched_cast)
    mp.setattr(builder, "create_dot", patched_dot)


@pytest.fixture(scope="module")
def kernels() -> dict[str, ModuleType]:
    """The kernel modules, loaded under the interpreter (the child process only)."""
    if not INTERPRETER:
        pytest.skip("runs in test_kernels_under_the_triton_interpreter's TRITON_INTERPRET=1 child")
    pytest.importorskip("triton")
    mp = pytest.MonkeyPatch()
    try:
        _patch_interpreter(mp)
        yield {name: importlib.import_module(f"real.kernels.{name}") for name in KERNEL_MODULES}
    finally:
        mp.undo()


@pytest.mark.skipif(INTERPRETER, reason="this process is the interpreter run")
def test_kernels_under_the_triton_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "interpreted",
           str(Path(__file__).resolve())]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    report = proc.stdout[-8000:] + proc.stderr[-4000:]
    assert proc.returncode == 0, report
    assert " passed" in report and " skipped" not in report, report


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_interpreted_norm_kernel(kernels, dtype):
    x = torch.randn(2, 3, 80).to(dtype)
    res, weight = torch.randn(2, 3, 80).to(dtype), torch.randn(80).to(dtype)
    normed, new_res = kernels["norm"].fused_add_rms_norm(x, res, weight, 1e-6)
    want_normed, want_res = reference.fused_add_rms_norm(x, res, weight, 1e-6)
    assert torch.equal(new_res, want_res)
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    torch.testing.assert_close(normed, want_normed, atol=tol * 4, rtol=tol)
    strided = x[:, 1:]  # no residual: the new residual is x itself, even a strided one
    normed, same = kernels["norm"].fused_add_rms_norm(strided, None, weight, 1e-6)
    assert same is strided
    want = reference.fused_add_rms_norm(strided, None, weight, 1e-6)[0]
    torch.testing.assert_close(normed, want, atol=tol * 4, rtol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_interpreted_rope_cache_kernel_is_bit_exact(kernels, dtype):
    args, _ = rope_case(dtype)
    ref_args = tuple(a.clone() if a.is_floating_point() else a for a in args)
    q, k, v = args[0], args[1], args[2]  # views of one qkv tensor: strided
    assert not q.is_contiguous()
    kernels["rope_cache"].rope_and_cache(q, k, v, *args[3:])
    reference.rope_and_cache(*ref_args)
    for got, want in zip((q, k, v, args[5], args[6]), ref_args[:3] + ref_args[5:7]):
        assert torch.equal(got.nan_to_num(123.0), want.nan_to_num(123.0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_interpreted_silu_and_mul_kernel(kernels, dtype):
    gate_up = (torch.randn(3, 2, 2 * 1100) * 4).to(dtype)  # two column blocks per row
    got = kernels["activation"].silu_and_mul(gate_up)
    tol = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[dtype]
    torch.testing.assert_close(got, reference.silu_and_mul(gate_up), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size,splits", [(16, 1), (16, 3), (256, 8)])
def test_interpreted_decode_kernel(kernels, dtype, block_size, splits):
    c = decode_case(block_size, dtype)
    got = kernels["attention_decode"].paged_decode_attention(*decode_args(c), splits,
                                                             block_n=16)
    want = reference.paged_decode_attention(*decode_args(c))
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got.float(), want.float(), atol=ATOL[dtype], rtol=ATOL[dtype])
    assert torch.equal(got[2], torch.zeros_like(got[2]))  # the padding row


@pytest.mark.parametrize("active", [1, 2, 8])
def test_interpreted_decode_kernel_with_runtime_splits_of_a_wider_grid(kernels, active):
    """A graph captured with 8 splits runs the plan of its batch: `active` of them share the
    keys, the rest find none; the result is the reference's, a padding row stays zero."""
    c = decode_case(16, torch.float32)
    got = kernels["attention_decode"].paged_decode_attention(
        *decode_args(c), 8, block_n=16, active_splits=torch.tensor([active], dtype=torch.int32))
    want = reference.paged_decode_attention(*decode_args(c))
    torch.testing.assert_close(got, want, atol=ATOL[torch.float32], rtol=ATOL[torch.float32])
    assert torch.equal(got[2], torch.zeros_like(got[2]))


@pytest.mark.parametrize("heads,head_dim", [((8, 1), 24), ((2, 2), 16)])
def test_interpreted_decode_kernel_groups_and_padded_head_dims(kernels, heads, head_dim):
    c = decode_case(16, torch.float16, heads, head_dim, lens=(33, 0, 5))
    got = kernels["attention_decode"].paged_decode_attention(*decode_args(c), 2, block_n=16)
    torch.testing.assert_close(got, reference.paged_decode_attention(*decode_args(c)),
                               atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 256])
def test_interpreted_prefill_kernel(kernels, dtype, block_size):
    c = prefill_case(block_size, dtype)
    rows, offsets = (torch.from_numpy(a) for a in prefill_tiles(c.q_len.numpy(), 16))
    got, want = torch.full(c.q.shape, 7.0, dtype=dtype), torch.full(c.q.shape, 7.0, dtype=dtype)
    kernels["attention_prefill"].paged_prefill_attention(*prefill_args(c), got, rows, offsets,
                                                         16, block_n=16)
    reference.paged_prefill_attention(*prefill_args(c), want)
    torch.testing.assert_close(got.float(), want.float(), atol=ATOL[dtype], rtol=ATOL[dtype])
    assert (got[~chunk_tokens(c)] == 7.0).all()


def test_interpreted_prefill_kernel_with_a_group_of_four_and_a_padded_head_dim(kernels):
    c = prefill_case(16, torch.float32, (8, 2), 24)
    rows, offsets = (torch.from_numpy(a) for a in prefill_tiles(c.q_len.numpy(), 32))
    got, want = torch.zeros_like(c.q), torch.zeros_like(c.q)
    kernels["attention_prefill"].paged_prefill_attention(*prefill_args(c), got, rows, offsets,
                                                         32, block_n=16)
    reference.paged_prefill_attention(*prefill_args(c), want)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=2e-5)


def test_interpreted_ops_route_to_the_kernels_under_use_triton(kernels, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the reference ran under use_triton(True)")

    c, p = decode_case(16, torch.float32), prefill_case(16, torch.float32)
    want_decode = reference.paged_decode_attention(*decode_args(c))
    want_prefill = torch.zeros_like(p.q)
    reference.paged_prefill_attention(*prefill_args(p), want_prefill)
    for name in ("paged_decode_attention", "paged_prefill_attention", "silu_and_mul"):
        monkeypatch.setattr(reference, name, refuse)
    with ops.use_triton(True):
        got = ops.paged_decode_attention(*decode_args(c), 2)
        out = torch.zeros_like(p.q)
        ops.paged_prefill_attention(*prefill_args(p), out)  # tiles built from q_len
        ops.silu_and_mul(torch.randn(2, 32))
    assert ops._FORCED.get() is None
    torch.testing.assert_close(got, want_decode, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(out, want_prefill, atol=2e-5, rtol=2e-5)


# --------------------------------------------------------------------------- sm_90 compile

class _Launches:
    """Stands in for a @triton.jit kernel: records each launch's arguments instead of running."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel  # the JITFunction
        self.calls: list[tuple[tuple, dict]] = []  # (args, kwargs) per launch

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, dict(kwargs)))


def _compile_sm90(kernel, args: tuple, kwargs: dict):
    """Compile one recorded launch for sm_90 with the specialization a real launch would get
    (16-byte-aligned pointers and multiple-of-16 ints marked divisible, ints equal to 1
    constant), as JITFunction.run does; no GPU needed."""
    import triton
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend, GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        pytest.skip("this triton lacks the ahead-of-time compile hooks used here")

    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
    bound = {**dict(zip([p.name for p in kernel.params], args)), **kwargs}
    signature, constexprs, attrs = {}, {}, {}
    for i, param in enumerate(kernel.params):
        value = bound[param.name]
        kind, key = (("constexpr", value) if param.is_constexpr
                     else native_specialize_impl(BaseBackend, value, False, True, True))
        signature[param.name] = kind
        if kind == "constexpr":
            constexprs[(i,)] = key
        elif isinstance(key, str):
            attrs[(i,)] = BaseBackend.parse_attr(key)
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs),
                          target=GPUTarget("cuda", 90, 32), options=options)


def _local_memory_bytes(compiled, cuobjdump: Path) -> int:
    """Per-thread stack (spilled registers, local arrays) of a compiled kernel, in bytes."""
    cubin = Path(os.environ.get("TMPDIR", "/tmp")) / f"servesim_{os.getpid()}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    try:
        out = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)],
                             capture_output=True, text=True, check=True).stdout
    finally:
        cubin.unlink()
    return int(out.split("STACK:")[1].split()[0])


def _llama8b_launches(mods: dict[str, ModuleType], dtype: torch.dtype) -> None:
    """Call every kernel wrapper once on Llama-3-8B shapes (Hq 32, Hkv 8, head_dim 128)."""
    x = torch.zeros(4, 4096, dtype=dtype)
    mods["norm"].fused_add_rms_norm(x, x, x[0], 1e-5)
    mods["activation"].silu_and_mul(torch.zeros(4, 2 * 14336, dtype=dtype))
    qkv = torch.zeros(4, 48 * 128, dtype=dtype)
    q, k, v = (t.view(4, -1, 128) for t in qkv.split([4096, 1024, 1024], dim=-1))
    cache = torch.zeros(8, 16, 8, 128, dtype=dtype)
    mods["rope_cache"].rope_and_cache(q, k, v, torch.zeros(4, dtype=torch.long),
                                      torch.zeros(64, 128), cache, cache, torch.zeros(4).long())
    tables, lens, index = torch.zeros(4, 8, dtype=torch.int32), torch.ones(4).int(), torch.arange(4)
    for splits in (1, 4):
        mods["attention_decode"].paged_decode_attention(q, cache, cache, tables, lens, index,
                                                        0.1, splits)
    rows = torch.zeros(1, dtype=torch.int32)
    block_m = ops.prefill_block_m(128, x.element_size())
    mods["attention_prefill"].paged_prefill_attention(
        q, cache, cache, tables, rows, lens[:1], rows, 0.1, torch.zeros_like(q), rows, rows,
        block_m)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_kernels_compile_for_sm90_without_spilling(dtype, monkeypatch):
    triton = pytest.importorskip("triton")
    if INTERPRETER:
        pytest.skip("compiles kernels, which the interpreter does not")
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not cuobjdump.exists():
        pytest.skip("this triton ships no cuobjdump")
    mods = {name: importlib.import_module(f"real.kernels.{name}") for name in KERNEL_MODULES}
    recorders = []
    for mod in mods.values():
        for name, obj in vars(mod).copy().items():
            if isinstance(obj, triton.runtime.JITFunction) and name.endswith("_kernel"):
                recorders.append((name, _Launches(obj)))
                monkeypatch.setattr(mod, name, recorders[-1][1])
    _llama8b_launches(mods, dtype)
    compiled = 0
    for name, rec in recorders:
        for args, kwargs in rec.calls:
            kernel = _compile_sm90(rec.kernel, args, kwargs)
            assert _local_memory_bytes(kernel, cuobjdump) == 0, (name, kwargs)
            compiled += 1
    assert compiled == 7  # norm, silu, rope, decode x2 + reduce, prefill
