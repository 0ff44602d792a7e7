"""Session ids for traces that have none, from the prompt blocks a conversation's turns share.

The Mooncake conversation trace names each 512-token prompt block by a hash id but carries no
conversation id. Every turn of a conversation starts with the same blocks (the conversation's
history), so the first `n` block ids are a conversation key: in the first 2,000 requests block
0 is one system block all share, and the first two ids split them into 1,441 conversations.
`workload.trace.session_blocks: n` sets `session_id` to that key, for session-affinity routing.
"""

from __future__ import annotations

import pandas as pd

from sim.util.errors import ConfigError


def sessions_from_blocks(df: pd.DataFrame, num_blocks: int, source: str) -> pd.DataFrame:
    """A copy of `df` whose `session_id` is each request's first `num_blocks` block ids
    (joined with "-"); requests with fewer blocks keep what they have."""
    where = "workload.trace.session_blocks"
    if "block_ids" not in df.columns:
        raise ConfigError(where, num_blocks, f"trace {source} has no block_ids to key sessions")
    if "session_id" in df.columns and df["session_id"].notna().any():
        raise ConfigError(where, num_blocks, f"trace {source} already has session ids")
    out = df.copy()
    out["session_id"] = ["-".join(str(int(b)) for b in ids[:num_blocks])
                         for ids in df["block_ids"]]
    return out
