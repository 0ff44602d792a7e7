"""Iteration-level Steps on the HF static-batch engine (sim/cluster/hf_continuous.py): a join step's time
and memory by hand, decode jumps, and static batches untouched."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cluster.hf_continuous import MixedShape, mixed_shape
from sim.core.executor import Step
from tests.test_magnus_hf_static import chatglm_v100, fig4_trace


def by_hand(ex):
    """The engine's constants from the model and GPU (ChatGLM-6B, V100-32GB, fp16)."""
    m, gpu, p = ex.deployment.model, ex.deployment.gpu, ex.params
    kv = 2 * m.num_layers * m.num_attention_heads * m.head_dim * 2  # bytes per token (fp16)
    c = gpu.peak_tensor_flops * p.compute_efficiency  # FLOP/s
    b = gpu.hbm_bandwidth * p.memory_efficiency  # bytes/s
    dense = 2.0 * (m.num_layer_params + m.vocab_size * m.hidden_size)  # FLOPs per token
    weights = (m.num_layer_params + m.vocab_size * m.hidden_size) * 2  # bytes per forward
    attn = 4.0 * m.num_layers * m.num_attention_heads * m.head_dim  # FLOPs per pair
    return m, p, kv, c, b, dense, weights, attn


def test_join_step_time_and_memory_by_hand():
    """Two decode rows (caches of 300 and 500) and one joiner (200-token prompt), 3 iterations:
    iteration 1 = the decode rows' forward padded to 501, the joiner's prefill, the re-layout
    of 3 rows x 501 tokens (read + write); then 3 rows decode over 502 and 503 tokens."""
    ex = chatglm_v100()
    m, p, kv, c, b, dense, weights, attn = by_hand(ex)
    assert ex.deployment.kv_bytes_per_token_per_gpu == kv
    step = Step(0, (0, 1, 2), (1, 1, 200), (300, 500, 0), (True,) * 3, num_iterations=3)
    assert mixed_shape(step) == MixedShape(2, 500, 1, 200, 0)

    def decode(rows, tokens):  # one padded decode iteration, `tokens` cached a row after it
        return (max(dense * rows / c, weights / b)
                + max(p.kv_passes * kv * rows * tokens / b, attn * rows * tokens / c)
                + p.step_overhead_s)

    score_pp = m.num_attention_heads * p.score_bytes_per_pair  # bytes per (query, key) pair
    prefill = max((dense * 200 + attn * 200 * 200) / c,
                  (weights + score_pp * 200 * 200 * m.num_layers + kv * 200) / b) \
        + p.step_overhead_s
    relayout = 2 * kv * 3 * 501 / b
    expected = [decode(2, 501) + prefill + relayout, decode(3, 502), decode(3, 503)]
    result = ex.execute(step)
    np.testing.assert_allclose(np.diff(result.iteration_ends_s, prepend=0.0), expected,
                               rtol=1e-12)
    assert not result.oom and relayout == pytest.approx(1.8e-3, rel=0.01)  # 1.38 GB at 765 GB/s

    grow = 1 + 1 / m.num_layers  # torch.cat holds one layer twice
    logits = m.vocab_size * 2 * p.logits_copies  # bytes per prefill position
    peak1 = 3 * 501 * kv * grow + (200 * kv * grow + 200 * (logits + score_pp * 200))
    # rows whose first iteration just fits, then just not (a 200-token joiner among 60 decodes)
    fits = int((ex.free_bytes - (peak1 - 3 * 501 * kv * grow)) // (501 * kv * grow))
    for rows, oom in ((fits, False), (fits + 1, True)):
        big = Step(0, tuple(range(rows)), (1,) * (rows - 1) + (200,),
                   (500,) * (rows - 1) + (0,), (True,) * rows)
        assert ex.execute(big).oom is oom


def test_decode_oom_iteration_matches_brute_force():
    ex = chatglm_v100()
    grow = 1 + 1 / ex.deployment.model.num_layers
    rows, ctx = 30, 800
    step = Step(0, tuple(range(rows)), (1,) * (rows - 1) + (600,), (ctx,) * (rows - 1) + (0,),
                (True,) * rows, num_iterations=1000)
    per_row = ex.deployment.kv_bytes_per_token_per_gpu * grow
    fits = [rows * (ctx + i) * per_row <= ex.free_bytes for i in range(1, 1001)]
    result = ex.execute(step)
    assert result.oom and result.num_iterations == fits.index(False)


def test_decode_jumps_equal_one_iteration_at_a_time():
    """A 40-iteration jump ends where 40 one-iteration steps (the policy's view) end."""
    ex = chatglm_v100()
    ctx, new = [120, 300, 0], [1, 1, 50]
    jump = ex.execute(Step(0, (0, 1, 2), tuple(new), tuple(ctx), (True,) * 3,
                           num_iterations=40))
    total = 0.0
    for _ in range(40):
        one = ex.execute(Step(0, (0, 1, 2), tuple(new), tuple(ctx), (True,) * 3))
        total += one.duration_s
        ctx, new = [c + n for c, n in zip(ctx, new)], [1, 1, 1]
    assert jump.duration_s == pytest.approx(total, rel=1e-12)
    cut = ex.execute(Step(0, (0, 1, 2), (1, 1, 50), (120, 300, 0), (True,) * 3,
                          num_iterations=40), until_s=1.0)
    assert cut.iteration_ends_s[-1] >= 1.0 > cut.iteration_ends_s[-2]


def test_static_batches_keep_their_exact_times():
    """No decode row: the padded-prefill path, to the bit (values before hf_continuous)."""
    from policies.simulate import simulate

    ex = chatglm_v100()
    static = Step(0, (0, 1, 2), (700, 700, 700), (0, 0, 0), (True,) * 3, num_iterations=500,
                  stop_on_arrival=False)
    assert mixed_shape(static) is None
    assert ex.execute(static).duration_s == 27.741239145261854
    vanilla = simulate(fig4_trace(), "vanilla", {"batch_size": 7}, [ex])
    magnus = simulate(fig4_trace(), "magnus", {"predictor": {"kind": "oracle"}}, [ex])
    assert vanilla.summary["duration_s"] == 237.01384239369025
    assert magnus.summary["duration_s"] == 60.70104828987768


def test_a_decode_only_step_pays_no_prefill_or_relayout():
    ex = chatglm_v100()
    step = Step(0, (0, 1), (1, 1), (10, 900), (True, True), num_iterations=2)
    assert mixed_shape(step) == MixedShape(2, 900, 0, 0, 0)
    np.testing.assert_allclose(np.diff(ex.execute(step).iteration_ends_s, prepend=0.0),
                               ex.decode_times(2, 900, 2), rtol=1e-12)
