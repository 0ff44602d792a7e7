"""What the measured rows themselves allow: the error of the best curve that never falls.

A kernel or collective takes no less time on more work, so any physical model of a stage's time
is non-decreasing in its one size (dense layers and composed layers in tokens, an all-reduce in
bytes). The least-squares non-decreasing curve through the measured log-times of one (GPU,
model, stage, TP) group (isotonic regression, pool-adjacent-violators) is the closest such a
model can get to them in that sense; its median and p90 |error| per regime say how much of a
model's miss is the data's own scatter: timer resolution (Vidur rounds to 1 us), cuBLAS
switching kernels from one token count to the next, an all-reduce table of three samples per
size whose median lands on one of two protocols. It is an estimate, not a bound: least squares
in log-time does not minimise the median or the p90 themselves. Where it is above a target,
no smooth physical model meets that target on those rows.

Stages with more than one size (attention: batch, context, chunk; composed steps) get none.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression

SIZE_COLUMN = {"dense": "num_tokens", "allreduce": "size_bytes",
               "layers_no_attn": "num_tokens"}  # the one size each 1-D stage grows with
GROUP = ["gpu", "model", "stage", "tp"]  # one non-decreasing curve per group


def monotone_errors(rows: pd.DataFrame) -> pd.Series:
    """Per row, |curve / measured - 1| of its group's least-squares non-decreasing curve in
    log-time (NaN for stages without one size)."""
    out = pd.Series(np.nan, index=rows.index, dtype=np.float64)
    keys = [k for k in GROUP if k in rows.columns]
    for _, group in rows.groupby(keys, sort=False):
        column = SIZE_COLUMN.get(str(group["stage"].iloc[0]))
        if column is None or column not in group.columns or len(group) < 2:
            continue
        size = group[column].to_numpy(np.float64)
        log_t = np.log(group["measured_s"].to_numpy(np.float64))
        curve = IsotonicRegression(increasing=True).fit(size, log_t).predict(size)
        out.loc[group.index] = np.abs(np.expm1(curve - log_t))
    return out
