"""Session ids keyed by shared prompt blocks (workload.trace.session_blocks)."""

import pandas as pd
import pytest

from sim.util.errors import ConfigError
from traces.session_keys import sessions_from_blocks


def trace(**extra) -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": [0.0, 1.0, 2.0], "prompt_tokens": [10, 20, 5],
                         "output_tokens": [1, 1, 1], **extra})


def test_turns_sharing_their_first_blocks_share_a_session() -> None:
    df = sessions_from_blocks(trace(block_ids=[(0, 7, 8), (0, 7, 8, 9), (0, 3)]), 2, "t")
    assert df["session_id"].tolist() == ["0-7", "0-7", "0-3"]


def test_fewer_blocks_than_asked_key_by_what_they_have() -> None:
    df = sessions_from_blocks(trace(block_ids=[(0,), (0, 7), (0, 7, 1)]), 3, "t")
    assert df["session_id"].tolist() == ["0", "0-7", "0-7-1"]


def test_refused_without_block_ids_or_with_sessions() -> None:
    with pytest.raises(ConfigError, match="session_blocks.*no block_ids"):
        sessions_from_blocks(trace(), 2, "t")
    with pytest.raises(ConfigError, match="already has session ids"):
        sessions_from_blocks(trace(block_ids=[(0,)] * 3, session_id=["a", "b", "a"]), 2, "t")


def test_config_field_checked() -> None:
    from experiments.config.workload import trace_from_dict

    assert trace_from_dict({"name": "mooncake", "session_blocks": 2}).session_blocks == 2
    with pytest.raises(ConfigError, match="session_blocks"):
        trace_from_dict({"name": "mooncake", "session_blocks": 0})
