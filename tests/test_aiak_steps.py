"""AIAK's three engine-loop steps (sim/cost/overhead.py): serial; async scheduling; async with a
pipelined tokenizer and static slots. Closed forms on one request and on a static batch."""

import numpy as np
import pytest

from policies.registry import policy_names
from policies.simulate import simulate
from sim.cost.overhead import SchedulingOverhead, build_overhead
from sim.util.errors import ConfigError
from tests.factories import LinearExecutor, generic_params, make_trace, random_trace
from tests.test_engine import OneIterationExecutor

EX = LinearExecutor(base_s=0.01, per_token_s=1e-4, per_ctx_s=1e-6)
PROMPT, OUTPUTS = 300, 40
# schedule 1 + 0.5 ms, detokenize 0.3 ms, output 0.1 + 0.6 ms (overlappable in async: 2.5 ms);
# prepare 0.4 + 0.2 ms (between iterations: 0.6 ms); one request, one sampled row per iteration
TERMS = dict(fixed_s=1e-3, per_request_s=5e-4, detokenize_per_request_s=3e-4,
             prepare_fixed_s=4e-4, prepare_per_request_s=2e-4, output_fixed_s=1e-4,
             output_per_request_s=6e-4)
OVERLAP_S, BETWEEN_S = 2.5e-3, 0.6e-3


def lone_gpu_times() -> np.ndarray:
    """GPU seconds of each iteration of one request alone on EX (prefill, then decodes)."""
    times = [EX.base_s + EX.per_token_s * PROMPT]
    times += [EX.base_s + EX.per_token_s + EX.per_ctx_s * (PROMPT + j) for j in range(OUTPUTS - 1)]
    return np.array(times)


def run_lone(ov: SchedulingOverhead):
    return simulate(make_trace([(0.0, PROMPT, OUTPUTS)]), "orca", {}, [EX], overhead=ov)


def test_step1_serial_token_gap_is_device_step_plus_every_host_term():
    gpu = lone_gpu_times()
    res = run_lone(SchedulingOverhead(**TERMS, mode="serial"))
    rec, s = res.records.iloc[0], res.summary
    host = OVERLAP_S + BETWEEN_S
    assert rec["tpot_s"] == pytest.approx(np.mean(gpu[1:]) + host, rel=1e-12)
    assert rec["e2e_s"] == pytest.approx(gpu.sum() + OUTPUTS * host, rel=1e-12)
    assert s["loop_gpu_share"] == pytest.approx(gpu.sum() / rec["e2e_s"], rel=1e-9)
    assert s["scheduling_s"] == pytest.approx(OUTPUTS * host, rel=1e-12)


def test_step2_async_hides_all_but_preparing_inputs_from_the_last_tokens():
    gpu = lone_gpu_times()
    res = run_lone(SchedulingOverhead(**TERMS, mode="async"))
    rec, s = res.records.iloc[0], res.summary
    # first iteration on an idle instance pays everything; later ones only prepare, since
    # 2.5 ms of schedule + output + detokenize < every GPU iteration (>= 10.4 ms)
    expected = gpu.sum() + OVERLAP_S + BETWEEN_S + (OUTPUTS - 1) * BETWEEN_S
    assert rec["e2e_s"] == pytest.approx(expected, rel=1e-12)
    assert rec["tpot_s"] == pytest.approx(np.mean(gpu[1:]) + BETWEEN_S, rel=1e-12)
    assert s["loop_gpu_share"] == pytest.approx(gpu.sum() / expected, rel=1e-9)
    assert s["scheduling_gap_s"] == pytest.approx(expected - gpu.sum(), rel=1e-9)


def test_step3_async_pipelined_static_slots_token_gap_is_the_device_step():
    gpu = lone_gpu_times()
    ov = SchedulingOverhead(**TERMS, mode="async", tokenizer="pipelined", slots="static")
    res = run_lone(ov)
    rec, s = res.records.iloc[0], res.summary
    # only the first iteration waits: fixed_s + per_request_s for the request taking a slot;
    # afterwards no slot changes (fixed_s alone, hidden), no output processing on the host
    # and nothing runs between iterations
    expected = gpu.sum() + 1e-3 + 5e-4
    assert rec["e2e_s"] == pytest.approx(expected, rel=1e-12)
    assert rec["tpot_s"] == pytest.approx(np.mean(gpu[1:]), rel=1e-12)
    assert s["scheduling_s"] == pytest.approx(1.5e-3 + (OUTPUTS - 1) * 1e-3, rel=1e-12)
    assert s["scheduling_gap_s"] == pytest.approx(1.5e-3, rel=1e-9)


def test_pipelined_tokenizer_takes_detokenize_out_of_a_host_bound_loop():
    # schedule 8 ms + detokenize 6 ms = 14 ms > the ~10.4 ms decode: async still waits
    # 14 - gpu_prev; with the tokenizer in its own process, 8 ms < gpu_prev is hidden
    terms = dict(fixed_s=8e-3, detokenize_per_request_s=6e-3, prepare_per_request_s=1e-3)
    gpu = lone_gpu_times()
    inline = run_lone(SchedulingOverhead(**terms, mode="async")).records.iloc[0]
    piped = run_lone(SchedulingOverhead(**terms, mode="async", tokenizer="pipelined"))
    gaps = np.maximum(14e-3 - gpu[:-1], 0.0) + 1e-3
    assert gaps[0] == pytest.approx(1e-3) and gaps[1] > 1e-3  # the prefill hides the first
    assert inline["e2e_s"] == pytest.approx(gpu.sum() + 15e-3 + gaps.sum(), rel=1e-12)
    assert piped.records.loc[0, "e2e_s"] == pytest.approx(
        gpu.sum() + 9e-3 + (OUTPUTS - 1) * 1e-3, rel=1e-12)


@pytest.mark.parametrize("slots,host_s", [("dynamic", 25 * 4 * 1e-3), ("static", 4 * 1e-3)])
def test_static_slots_schedule_only_the_requests_that_join(slots, host_s):
    # vanilla runs the four together to the end: with static slots only the first iteration
    # pays per_request_s (four requests take slots), dynamic slots pay it every iteration
    b, prompt, outputs = 4, 100, 25
    ex = LinearExecutor(base_s=0.01, per_token_s=2e-4)
    ov = SchedulingOverhead(per_request_s=1e-3, slots=slots)
    res = simulate(make_trace([(0.0, prompt, outputs)] * b), "vanilla", {"batch_size": b}, [ex],
                   overhead=ov)
    gpu = outputs * ex.base_s + ex.per_token_s * (b * prompt + (outputs - 1) * b)
    np.testing.assert_allclose(res.records["e2e_s"], gpu + host_s, rtol=1e-12)


AIAK = [SchedulingOverhead(**TERMS, per_token_s=2e-6, mode="serial"),
        SchedulingOverhead(**TERMS, mode="async"),
        SchedulingOverhead(**TERMS, mode="async", tokenizer="pipelined", slots="static")]


@pytest.mark.parametrize("step", [1, 2, 3])
@pytest.mark.parametrize("policy", policy_names())
def test_jumping_over_decode_runs_stays_exact_in_every_step(policy, step):
    trace = random_trace(np.random.default_rng(3), 60, rate=20.0)
    ex = LinearExecutor(capacity=6000, per_ctx_s=1e-6)
    ov = AIAK[step - 1]
    jump = simulate(trace, policy, generic_params(policy), [ex, ex], overhead=ov)
    one = simulate(trace, policy, generic_params(policy), [OneIterationExecutor(ex)] * 2,
                   overhead=ov)
    for col in ("first_token_s", "finish_s", "scheduled_s", "max_itl_s"):
        np.testing.assert_allclose(jump.records[col], one.records[col], rtol=1e-9, atol=1e-9)
    for key in ("p99_itl_s", "loop_gpu_share", "scheduling_s", "scheduling_gap_s"):
        assert jump.summary[key] == pytest.approx(one.summary[key], rel=1e-9)


def test_no_overhead_keeps_the_loop_all_gpu():
    res = simulate(make_trace([(0.0, PROMPT, OUTPUTS)]), "orca", {}, [EX])
    assert res.summary["loop_gpu_share"] == 1.0


def test_options_read_from_a_config_mapping_and_bad_values_name_the_field():
    ov = build_overhead({"mode": "async", "tokenizer": "pipelined", "slots": "static",
                         "detokenize_per_request_s": 1e-5, "output_fixed_s": 1e-4})
    assert (ov.tokenizer, ov.slots, ov.output_fixed_s) == ("pipelined", "static", 1e-4)
    assert not SchedulingOverhead(prepare_fixed_s=1e-4).is_zero
    for bad, field in (({"tokenizer": "triton"}, "tokenizer"), ({"slots": "fixed"}, "slots"),
                       ({"output_per_request_s": -1.0}, "output_per_request_s"),
                       ({"prepare_fixed_s": True}, "prepare_fixed_s")):
        with pytest.raises(ConfigError, match=f"scheduling_overhead.{field}"):
            build_overhead(bad)
