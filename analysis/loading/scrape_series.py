"""A collector run's scrapes as the sampler-CSV columns the reconciliations read, and every point's window
cut on the collector's own monotonic clock.

A collector run needs no clock-offset search: requests and scrapes carry the same CLOCK_MONOTONIC, and the
collector scrapes /metrics just before a point's first request (`point_start`) and just after its last one
ended (`point_end`), so a counter's difference across a point is exact. Each scrape is placed at the middle
of its request (start + end) ÷ 2, s; the boundary scrapes lie wholly outside the point's requests.

Columns (the sampler CSV's names, so one set of reconciliations serves both kinds of campaign):
vLLM histograms and counters, llama.cpp's ``llamacpp:*`` counters (prompt and generation seconds and tokens,
``llama_decode`` calls), and the running/waiting gauges of both — by the sample names of
``collector.raw.metric_families``, the list the collector keeps whole when it stores a page bounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analysis.core.windows import (
    PointWindowData,
    Window,
    activity_span,
    counter_delta,
    gauge_stats,
    window_indices,
)
from analysis.parse.scrapes_jsonl import ScrapeRecord, counter_total, parsed_samples
from collector.raw.metric_families import LLAMACPP_COUNTERS, LLAMACPP_GAUGES, VLLM_COUNTERS, VLLM_GAUGES

NS_PER_S = 1e9

COUNTERS = (*VLLM_COUNTERS, *LLAMACPP_COUNTERS)
GAUGES = ("running", "waiting", "kv_usage")


def scrape_time_s(start_mono_ns: int, end_mono_ns: int) -> float:
    """When a scrape saw the server, s on the monotonic clock: (start + end) ÷ 2 ÷ 1e9."""
    return (start_mono_ns + end_mono_ns) / 2 / NS_PER_S


def series(
    records: Sequence[ScrapeRecord], path: str = "scrapes.jsonl"
) -> tuple[list[float], dict[str, list[float]], list[int]]:
    """(ts_s, {column: values}, scrapes.jsonl line per sample) from the successful /metrics scrapes whose body
    parses, in time order. A column absent from a scrape is NaN there; a column absent from every scrape is
    left out."""
    ok = sorted(
        (r for r in records if r.source == "metrics" and r.ok),
        key=lambda r: (scrape_time_s(r.start_mono_ns, r.end_mono_ns), r.line),
    )
    names = {
        **VLLM_COUNTERS,
        **LLAMACPP_COUNTERS,
        **{f"g:{k}": v for k, v in VLLM_GAUGES.items()},
        **{f"gl:{k}": v for k, v in LLAMACPP_GAUGES.items()},
    }
    raw: dict[str, list[float]] = {k: [] for k in names}
    ts: list[float] = []
    lines: list[int] = []
    for r in ok:
        samples = parsed_samples(r, path)
        if samples is None:  # garbage for a body: a failed scrape
            continue
        ts.append(scrape_time_s(r.start_mono_ns, r.end_mono_ns))
        lines.append(r.line or 0)  # 0: a record built in memory; every one read from a file has its line
        for col, name in names.items():
            v = counter_total(samples, name)
            raw[col].append(math.nan if v is None else v)
    cols: dict[str, list[float]] = {}
    for col, vals in raw.items():
        if all(math.isnan(v) for v in vals):
            continue
        out = col.split(":", 1)[1] if ":" in col else col
        if out in cols:  # both engines' gauges never appear in one server's scrapes
            continue
        cols[out] = vals
    return ts, cols, lines


def point_window(send_mono_ns: Sequence[int], end_mono_ns: Sequence[int]) -> Window:
    """A point's span on the monotonic clock, s: [first send, last end] of its requests."""
    return Window(start_s=min(send_mono_ns) / NS_PER_S, end_s=max(end_mono_ns) / NS_PER_S)


def window_data(ts: Sequence[float], cols: Mapping[str, Sequence[float]], win: Window) -> PointWindowData:
    """Counter differences between the scrapes enclosing the window and gauge statistics inside it
    (the same record the sampler-CSV path builds)."""
    active = [
        any(c in cols and not math.isnan(cols[c][i]) and cols[c][i] > 0 for c in ("running", "waiting"))
        for i in range(len(ts))
    ]
    idx = window_indices(ts, win)
    return PointWindowData(
        window=win,
        activity=activity_span(ts, active, win, pad_s=0.0),
        deltas={c: counter_delta(ts, cols[c], win) for c in COUNTERS if c in cols},
        gauges={g: gauge_stats(ts, cols[g], win) for g in GAUGES if g in cols},
        first_row=idx.start,
        last_row=idx.stop - 1,
    )


def gpu_busy_samples(records: Sequence[ScrapeRecord]) -> list[tuple[int, float]]:
    """(start_mono_ns, utilization.gpu %) of every successful nvidia-smi sample (the sampler's ``tick``s):
    the share of the last sample period in which a kernel ran on the GPU (nvidia-smi's definition). A sample
    whose CSV lacks the column or holds no number is left out."""
    out: list[tuple[int, float]] = []
    for r in records:
        if r.source != "nvidia-smi" or r.tag != "tick" or not r.ok or not r.text:
            continue
        lines = r.text.strip().splitlines()
        if len(lines) < 2:
            continue
        head = [h.strip() for h in lines[0].split(",")]
        col = next((i for i, h in enumerate(head) if h.startswith("utilization.gpu")), None)
        vals = [v.strip() for v in lines[1].split(",")]
        if col is None or col >= len(vals):
            continue
        try:
            out.append((r.start_mono_ns, float(vals[col])))
        except ValueError:
            continue
    return out


@dataclass(frozen=True)
class BoundedScrapes:
    """The /metrics scrapes of a run stored bounded (a page larger than the collector's stored bound, kept
    as the families analysis reads): how many of how many, the most series one of them dropped, and the
    scrapes.jsonl line of the first."""

    bounded: int
    scrapes: int
    max_dropped_series: int
    first_line: int


def bounded_scrapes(records: Sequence[ScrapeRecord]) -> BoundedScrapes | None:
    """The run's bounded /metrics scrapes (``ScrapeRecord.bounded``); None when every page was kept whole."""
    metrics = [r for r in records if r.source == "metrics" and r.ok]
    cut = [r for r in metrics if r.bounded]
    if not cut:
        return None
    return BoundedScrapes(
        bounded=len(cut),
        scrapes=len(metrics),
        max_dropped_series=max(r.dropped_series or 0 for r in cut),
        first_line=min(r.line or 0 for r in cut),
    )
