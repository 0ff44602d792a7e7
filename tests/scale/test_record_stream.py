"""Records and events streamed to their files (sim/records/record_stream.py, event_log.py,
column_spool.py) give the bytes `DataFrame.to_parquet` of the whole frame gives, and the same
summaries: spooled in small chunks, several row groups, requests finishing out of order,
columns whose chunks differ in type (all-int in one, NaN / None / str in another)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sim.engine.simulate as simulate_module
import sim.records.record_log as record_log
import sim.records.record_stream as record_stream
import sim.records.step_store as step_store
from sim.core.request import Request, RequestStatus
from sim.records.column_spool import ColumnSpool
from sim.records.event_log import EVENT_COLUMNS, events_frame, write_events
from sim.records.record_log import RecordLog, compact
from sim.records.record_stream import RecordStream

CELL = st.one_of(st.integers(-3, 9), st.floats(0, 5), st.none(), st.sampled_from(["a", "bc"]),
                 st.booleans())


def _same_bytes(a: Path, b: Path) -> bool:
    return a.read_bytes() == b.read_bytes()


@settings(max_examples=60, deadline=None)
@given(columns=st.lists(st.lists(CELL, min_size=1, max_size=4), min_size=1, max_size=4),
       rows=st.integers(1, 25), fold=st.integers(1, 7), group=st.integers(1, 9),
       seed=st.integers(0, 99))
def test_spooled_table_is_the_whole_frame(tmp_path_factory, columns: list, rows: int,
                                          fold: int, group: int, seed: int) -> None:
    """Columns drawn from a few value kinds, chunked by `fold`: dtypes, values and parquet
    bytes as pandas gives for the whole lists (whenever pandas can write them)."""
    tmp = tmp_path_factory.mktemp("spool")
    rng = random.Random(seed)
    data = {f"c{i}": [rng.choice(kinds) for _ in range(rows)] for i, kinds in enumerate(columns)}
    whole = pd.DataFrame(data)
    try:
        whole.to_parquet(tmp / "ref.parquet", index=False, row_group_size=group)
    except Exception:  # noqa: BLE001 - a mix pyarrow cannot write: nothing to compare
        return
    spool = ColumnSpool(list(data))
    for start in range(0, rows, fold):
        spool.add({n: compact(v[start:start + fold]) for n, v in data.items()})
    dtypes = spool.dtypes()
    assert dtypes == whole.dtypes.to_dict()
    frame = spool.frame(0, rows, dtypes)
    pd.testing.assert_frame_equal(frame, whole)
    old = step_store.ROW_GROUP
    step_store.ROW_GROUP = group
    try:
        frames = (spool.frame(s, s + group, dtypes) for s in range(0, rows, group))
        step_store.write_frames(tmp / "new.parquet", frames, spool.sample())
    finally:
        step_store.ROW_GROUP = old
        spool.close()
    assert _same_bytes(tmp / "new.parquet", tmp / "ref.parquet")


def _request(i: int, rng: random.Random) -> Request:
    r = Request(i, float(i), rng.randint(1, 50), rng.randint(1, 20))
    if rng.random() < 0.3:
        r.status = RequestStatus.REJECTED  # never scheduled: NaN times
        r.reason = "prompt_too_long"
    else:
        r.status = RequestStatus.FINISHED
        r.scheduled_s, r.first_token_s, r.finish_s = i + 0.5, i + 1.0, i + 2.5
        r.num_output_tokens = r.target_output_tokens
    if rng.random() < 0.2:
        r.app = "chat"  # None elsewhere: an object column with strings in some chunks
    return r


@pytest.mark.parametrize("spill", [0, 5, 1000])
def test_out_of_order_finishes_give_the_records_in_id_order(tmp_path: Path, monkeypatch,
                                                            spill: int) -> None:
    """Requests final in a shuffled order (a window of 40): the streamed file is the bytes of
    RecordLog's whole frame, and the reorder buffer never holds more than the window."""
    monkeypatch.setattr(record_log, "FOLD", 7)
    monkeypatch.setattr(step_store, "ROW_GROUP", 23)
    rng = random.Random(1)
    requests = [_request(i, rng) for i in range(300)]
    order = sorted(range(300), key=lambda i: i + rng.uniform(0, 40))
    kept, streamed = RecordLog(), RecordStream(spill_after=spill)
    held = 0
    for i in order:
        kept.add((requests[i],))
        streamed.add((requests[i],))
        held = max(held, len(streamed._heap))
    assert held <= 60
    whole = pd.DataFrame(kept.columns())
    spooled = spill < len(requests)  # else written as the whole frame, one row group
    whole.to_parquet(tmp_path / "ref.parquet", index=False,
                     row_group_size=23 if spooled else None)
    assert streamed.write_parquet(tmp_path / "new.parquet", lambda frame: frame) is None
    assert _same_bytes(tmp_path / "new.parquet", tmp_path / "ref.parquet")
    assert whole["scheduled_s"].isna().any()
    assert (whole["request_id"].to_numpy() == np.arange(300)).all()


def test_int_in_one_chunk_nan_in_another_is_float(tmp_path: Path, monkeypatch) -> None:
    """A column all-int in the first chunks and None in a later one is float64, as pandas
    infers the whole list; the file is the whole frame's."""
    monkeypatch.setattr(step_store, "ROW_GROUP", 4)
    values = [1, 2, 3, 4, 5, None, 7, 8, 9]
    spool = ColumnSpool(["x", "s"])
    for start in range(0, 9, 3):
        part = values[start:start + 3]
        spool.add({"x": compact(part), "s": compact([str(v) for v in part])})
    whole = pd.DataFrame({"x": values, "s": [str(v) for v in values]})
    assert spool.dtypes() == {"x": np.dtype(np.float64), "s": whole["s"].dtype}
    whole.to_parquet(tmp_path / "ref.parquet", index=False, row_group_size=4)
    dtypes = spool.dtypes()
    step_store.write_frames(tmp_path / "new.parquet",
                            (spool.frame(s, s + 4, dtypes) for s in range(0, 9, 4)),
                            spool.sample())
    assert _same_bytes(tmp_path / "new.parquet", tmp_path / "ref.parquet")


def test_spooled_events_are_the_whole_frame(tmp_path: Path, monkeypatch) -> None:
    """Events spooled every 3 (an int time among floats): the events frame's bytes."""
    monkeypatch.setattr(step_store, "ROW_GROUP", 5)
    events = [(0, "cut", 1, "max_model_len: 9"), (0.5, "rejected", 2, "x")] + [
        (1.0 + k, "preempt", k, "") for k in range(14)]
    ref = events_frame(events)
    ref.to_parquet(tmp_path / "ref.parquet", index=False, row_group_size=5)
    from sim.records.recorder import Recorder

    recorder = Recorder(event_spill=3)
    for event in events:
        recorder.event(*event)
    assert recorder.event_spool is not None and len(recorder.events) < 3
    assert recorder.write_events(tmp_path / "new.parquet") is None
    assert _same_bytes(tmp_path / "new.parquet", tmp_path / "ref.parquet")
    assert list(ref.columns) == list(EVENT_COLUMNS)
    write_events(tmp_path / "none.parquet", [], None)  # no events: the empty frame's file
    events_frame([]).to_parquet(tmp_path / "empty.parquet", index=False)
    assert _same_bytes(tmp_path / "none.parquet", tmp_path / "empty.parquet")


def _trace(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    return pd.DataFrame({"arrival_s": np.cumsum(rng.exponential(0.04, n)),
                         "prompt_tokens": rng.integers(10, 3000, n),
                         "output_tokens": rng.integers(1, 600, n)})


def test_streamed_run_gives_the_in_memory_files_and_summary(tmp_path: Path,
                                                            monkeypatch) -> None:
    """`simulate(..., records_path, events_path)` with tiny spool thresholds (several row
    groups, rejections, preemptions, out-of-order finishes, a frontend delay): the files are
    the bytes of the in-memory frames', and the summary is the same."""
    from policies.simulate import simulate
    from sim.cluster.spec import ClusterSpec, build_executors

    ex = build_executors(ClusterSpec(model="llama-2-7b", gpu="A100-80GB",
                                     cost_model={"kind": "roofline"}))
    trace = _trace(500)
    options = dict(seed=0, max_model_len=2048, frontend_s=0.01)
    ref = simulate(trace, "vllm_v0", {"max_num_seqs": 256}, ex, **options)
    monkeypatch.setattr(record_log, "FOLD", 9)
    monkeypatch.setattr(record_stream, "RECORD_SPILL", 30)
    monkeypatch.setattr(simulate_module, "EVENT_SPILL", 4)
    monkeypatch.setattr(step_store, "ROW_GROUP", 64)
    out = simulate(trace, "vllm_v0", {"max_num_seqs": 256}, ex, **options,
                   records_path=tmp_path / "r.parquet", events_path=tmp_path / "e.parquet")
    assert out.table_path("records") == tmp_path / "r.parquet"
    assert out.num_rows("records") == len(ref.records) == 500
    assert set(ref.events["kind"]) >= {"rejected", "cut", "preempt"}
    for name, frame in (("r", ref.records), ("e", ref.events)):
        frame.to_parquet(tmp_path / f"{name}_ref.parquet", index=False, row_group_size=64)
        assert _same_bytes(tmp_path / f"{name}.parquet", tmp_path / f"{name}_ref.parquet")
    assert out.records.equals(ref.records) and out.events.equals(ref.events)
    assert json.dumps(out.summary, default=str) == json.dumps(ref.summary, default=str)
    narrow = out.record_frame(["status", "ttft_s"])
    assert list(narrow.columns) == ["status", "ttft_s"]
