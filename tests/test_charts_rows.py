"""A long table still makes a chart (issue #12): Altair refuses to embed more than 5,000 rows by default, and
an overload of ~20 minutes sampled by the collector is a timeline longer than that (two quantities of the
requests panel double it). ``collector analyze`` used to end there with MaxRowsError."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.core import charts


def test_a_long_overload_timeline_is_drawn():
    n = 3000  # 50 minutes at the collector's 1 Hz: 6,000 rows in the requests panel
    t = np.arange(n, dtype=float)
    df = pd.DataFrame({"round": "", "run": "vllm-overload", "engine": "vllm", "weight_format": "bf16",
                       "test_kind": "overload", "t_s": t, "kv_usage_pct": np.minimum(100.0, t / 10.0),
                       "running": np.minimum(14, t // 60), "waiting": np.maximum(0, t // 60 - 14),
                       "preemptions": t // 90})  # fmt: skip
    spec = charts.overload_timeline(df).to_dict()
    datasets = spec.get("datasets", {})
    assert max(len(rows) for rows in datasets.values()) >= 2 * n  # the requests panel, every sample embedded
