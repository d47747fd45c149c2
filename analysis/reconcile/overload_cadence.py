"""The overload run's cadence as the reference study states it: the mean interval between preemptions from
the first to the last (the counter's steps on the sampler's clock), and the KV pool's highest use.

Keys: ``<round>.overload.<metric>`` (imported campaigns; our vLLM overload runs: ``runs.<run>.overload.``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from analysis import findings as fnd
from analysis.campaign import Campaign
from analysis.keys import At
from analysis.reconcile import Context, Section
from analysis.windows import PointWindowData, window_indices


def step_times(ts: Sequence[float], counter: Sequence[float], idx: range) -> list[tuple[float, float]]:
    """Where a cumulative counter rose inside a window: (sample time s, increase) per rising sample."""
    out = []
    prev = None
    for i in idx:
        v = counter[i]
        if math.isnan(v):
            continue
        if prev is not None and v > prev:
            out.append((ts[i], v - prev))
        prev = v
    return out


def mean_interval_s(steps: list[tuple[float, float]]) -> float | None:
    """Mean time between events from the first to the last, s: (last time − first time) ÷ (events − 1); the
    events of one sample share its time. None below two events."""
    n = sum(d for _, d in steps)
    if n < 2:
        return None
    return (steps[-1][0] - steps[0][0]) / (n - 1)


def run(campaign: Campaign, ctx: Context) -> Section:
    findings: list[fnd.Finding] = []
    for p in campaign.points(engine="vllm", test_kind="overload"):
        w: PointWindowData | None = ctx.window(p)  # type: ignore[assignment]
        if p.warmup or w is None or p.run.name not in ctx.sampler_series:
            continue
        ts, cols = ctx.sampler_series[p.run.name]
        idx = window_indices(ts, w.window)
        at = (
            At(round=p.run.round, topic="overload")
            if not p.run.own
            else At(level="run", run=p.run.name, engine="vllm", topic="overload")
        )
        src = [p.run.cite(p.run.counter_source)] if p.run.counter_source else [p.cite()]
        if "preemptions" in cols:
            steps = step_times(ts, cols["preemptions"], idx)
            iv = mean_interval_s(steps)
            if iv is not None:
                findings.append(
                    fnd.measured(
                        at("preemption_interval_s"),
                        iv,
                        "s",
                        src,
                        first_s=steps[0][0] - w.window.start_s,
                        last_s=steps[-1][0] - w.window.start_s,
                    )
                )
        kv = [cols["kv_usage"][i] for i in idx if "kv_usage" in cols and not math.isnan(cols["kv_usage"][i])]
        for level in (90, 95):
            if kv:
                share = sum(1 for v in kv if v * 100.0 >= level) / len(kv) * 100.0
                findings.append(fnd.measured(at(f"kv_usage_at_least_{level}_share_pct"), share, "%", src))
        if kv:
            findings.append(
                fnd.measured(
                    at("peak_kv_usage_pct"),
                    max(kv) * 100.0,
                    "%",
                    src,
                    median_pct=sorted(kv)[len(kv) // 2] * 100.0,
                )
            )
    return Section(name="overload_cadence", findings=findings)
