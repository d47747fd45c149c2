"""Per point, what the sampler and the bench file say beside the curves: running and waiting requests over the
point's window, the KV pool's mean use, the card's power and temperature, mean ITL and TPOT, the time a
request waits for other requests' prefills, and the throughput against one stream — the ``point_details``
table. Per concurrency sweep, the findings the reference study states in these words: the card's power at the
highest concurrency against its board power, the hottest sample, the requests actually running and the pool's
mean use there, how often the queue was not empty, the last step's marginal throughput and how much the
decode step grew from one stream to the highest concurrency against the bandwidth floor.

Keys: ``<round>.telemetry.<engine>.<metric>`` and ``<round>.concurrency.<engine>.<metric>`` (imported
campaigns), ``runs.<run>.telemetry|concurrency.<metric>`` (ours).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.core.windows import window_indices
from analysis.loading.campaign import BenchPoint, Campaign
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.concurrency import POINT_ID_COLUMNS
from analysis.reconcile.lengths import pool_tokens
from analysis.reconcile.roofline import SweepSeries, mean_context_tokens, roofline_floor_ms, sweep_series
from analysis.reconcile.theoryctx import TheoryCtx

GAUGES = ("running", "waiting", "kv_usage", "power_w", "temp_c")
COPIED = (
    *POINT_ID_COLUMNS,
    "point",
    "input_len_tokens",
    "duration_s",
    "output_throughput_tokens_per_s",
    "total_throughput_tokens_per_s",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "mean_ttft_ms",
    "p50_itl_ms",
    "p90_itl_ms",
    "p99_itl_ms",
    "mean_itl_ms",
    "mean_tpot_ms",
    "p50_e2el_ms",
    "mean_output_tokens_per_request",
    "mfu_pct",
    "mbu_pct",
    "gate_ok",
)


def gauge_stats(values: Sequence[float]) -> dict[str, float] | None:
    """Mean, median and largest of a gauge's samples in a window (NaN samples left out); None if none."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return None
    return {"mean": statistics.fmean(vals), "p50": statistics.median(vals), "max": max(vals)}


def nonzero_share_pct(values: Sequence[float]) -> float | None:
    """Share of a gauge's samples above zero, %: samples > 0 ÷ samples × 100 (NaN left out)."""
    vals = [v for v in values if not math.isnan(v)]
    return sum(1 for v in vals if v > 0) / len(vals) * 100.0 if vals else None


def stall_share_pct(mean_tpot_ms: float, p50_itl_ms: float) -> float:
    """How much longer a request's mean token gap is than the typical gap, %: (mean TPOT ÷ p50 ITL − 1) × 100
    — the time decoding streams spend waiting for other requests' prefills (0: uniform decode)."""
    return (mean_tpot_ms / p50_itl_ms - 1.0) * 100.0


def growth_pct(first: float, last: float) -> float:
    """Growth from the first to the last value, %: (last ÷ first − 1) × 100."""
    return (last / first - 1.0) * 100.0


def duration_per_batch_s(duration_s: float, requests: int, concurrency: int) -> float:
    """A point's wall time per batch of ``concurrency`` requests, s: duration ÷ ceil(requests ÷ concurrency) —
    equal to one request's end-to-end time when requests enter only in whole batches."""
    return duration_s / math.ceil(requests / concurrency)


def read_gb_per_iteration(read_bytes: float, iterations: float) -> float:
    """Bytes the engine's counter says one iteration read, GB (10⁹): Δread_bytes ÷ Δiterations ÷ 10⁹."""
    return read_bytes / iterations / 1e9


def marginal_throughput(c_lo: int, tps_lo: float, c_hi: int, tps_hi: float) -> float:
    """Output tokens/s each added slot brings between two concurrencies, tokens/s per slot:
    (tokens/s at c_hi − tokens/s at c_lo) ÷ (c_hi − c_lo)."""
    return (tps_hi - tps_lo) / (c_hi - c_lo)


def mean_kv_usage_theory_pct(
    mean_running: float, input_len: int, output_len: float, pool_tokens: int
) -> float:
    """The KV pool's expected mean use, %: mean running × (input + output ÷ 2) ÷ pool × 100 (a running request
    holds its prompt and, on average, half its output)."""
    return mean_running * mean_context_tokens(input_len, output_len) / pool_tokens * 100.0


def _window_gauges(ctx: Context, key: str, run: str) -> dict[str, list[float]]:
    w = ctx.windows.get(key)
    if w is None or run not in ctx.sampler_series:
        return {}
    ts, cols = ctx.sampler_series[run]
    idx = window_indices(ts, w.window)
    return {g: [cols[g][i] for i in idx] for g in GAUGES if g in cols}


def _detail_row(r: pd.Series, ctx: Context, single: dict[tuple[Any, Any, Any], float]) -> dict[str, Any]:
    row = {c: r.get(c) for c in COPIED}
    run = str(r["key"]).rsplit("/", 1)[0]
    row["run"] = run
    g = _window_gauges(ctx, str(r["key"]), run)
    row["sampled"] = bool(g)  # the run's sampler covered this point's window
    for name, vals in g.items():
        st = gauge_stats(vals)
        if st is None:
            continue
        scale = 100.0 if name == "kv_usage" else 1.0  # the gauge is a fraction; the column says %
        suffix = "_pct" if name == "kv_usage" else ""
        for stat in ("mean", "p50", "max"):
            row[f"{name}_{stat}{suffix}"] = st[stat] * scale
    if "waiting" in g:
        row["waiting_nonzero_share_pct"] = nonzero_share_pct(g["waiting"])
    tpot, itl = r.get("mean_tpot_ms"), r.get("p50_itl_ms")
    if tpot and itl and not (pd.isna(tpot) or pd.isna(itl)):
        row["stall_share_pct"] = stall_share_pct(float(tpot), float(itl))
    dur, n, c = r.get("duration_s"), r.get("num_prompts"), r.get("concurrency")
    if dur and n and c and not any(pd.isna(x) for x in (dur, n, c)):
        row["duration_per_batch_s"] = duration_per_batch_s(float(dur), int(n), int(c))
    rb, it = r.get("read_bytes_delta"), r.get("iterations")
    if rb and it and not (pd.isna(rb) or pd.isna(it)):
        row["read_gb_per_iteration"] = read_gb_per_iteration(float(rb), float(it))
    base = single.get((r.get("round"), r.get("engine"), r.get("test")))
    tps = r.get("output_throughput_tokens_per_s")
    if base and tps and not pd.isna(tps):
        row["throughput_gain_over_single"] = float(tps) / base
    return row


def details_table(points: pd.DataFrame, ctx: Context) -> pd.DataFrame:
    """One row per measured (not warm-up) point: the copied bench numbers and the sampler's window stats."""
    if points.empty:
        return pd.DataFrame()
    pts = points[~points["warmup"].astype(bool)]
    single = {
        (r["round"], r["engine"], r["test"]): float(r["output_throughput_tokens_per_s"])
        for _, r in pts.iterrows()
        if r["concurrency"] == 1 and r.get("output_throughput_tokens_per_s")
    }
    return pd.DataFrame([_detail_row(r, ctx, single) for _, r in pts.iterrows()])


def _at(s: SweepSeries, topic: str) -> At:
    run = s["points"][0].run
    if run.own:
        return run_at(run, s["weight_format"], topic=topic)
    return engine_at(s["round"] or None, s["engine"], s["weight_format"], topic=topic)


def _row_of(table: pd.DataFrame, p: BenchPoint) -> pd.Series | None:
    if table.empty:
        return None
    m = table[(table["run"] == p.run.name) & (table["point"] == p.label)]
    return m.iloc[0] if len(m) else None


def _num(row: pd.Series | None, col: str) -> float | None:
    if row is None or col not in row or pd.isna(row[col]):
        return None
    return float(row[col])


def _telemetry(
    s: SweepSeries, top: BenchPoint, rows: list[pd.Series], th: TheoryCtx, src: list[str]
) -> list[Any]:
    """The card under the sweep's heaviest load: the median power over the top point's window as a share of
    the board power (the datasheet's limit), and the hottest sample of the sweep."""
    out: list[fnd.Finding] = []
    at = _at(s, "telemetry")
    p50, mx = _num(rows[-1], "power_w_p50"), _num(rows[-1], "power_w_max")
    limit = th.gpu.board_power_w if th.gpu else None
    if p50 is not None and limit:
        out.append(
            fnd.measured(
                at("power_share_of_board_power_at_max_concurrency_pct"),
                p50 / limit * 100.0,
                "%",
                src + (th.gpu_source or []),
                power_w_p50=p50,
                power_w_max=mx,
                board_power_w=limit,
                concurrency=top.concurrency,
            )
        )
    temps = [t for r in rows if (t := _num(r, "temp_c_max")) is not None]
    if temps:
        out.append(fnd.measured(at("temp_c_max"), max(temps), "°C", src))
    return out


def _queue(
    s: SweepSeries, top: BenchPoint, top_row: pd.Series, pool: int | None, src: list[str]
) -> list[Any]:
    """Requests actually running at the highest concurrency (mean, median), how often the queue held any,
    and the pool's mean use against mean running × mean context ÷ pool."""
    out: list[fnd.Finding] = []
    at = _at(s, "concurrency")
    mean_r, p50_r = _num(top_row, "running_mean"), _num(top_row, "running_p50")
    if mean_r is not None:
        out.append(
            fnd.measured(
                at("mean_running_at_max_concurrency"),
                mean_r,
                "requests",
                src,
                nominal_concurrency=top.concurrency,
            )
        )
    if p50_r is not None:
        out.append(
            fnd.measured(
                at("median_running_at_max_concurrency"),
                p50_r,
                "requests",
                src,
                nominal_concurrency=top.concurrency,
            )
        )
    share = _num(top_row, "waiting_nonzero_share_pct")
    if share is not None:
        out.append(fnd.measured(at("waiting_nonzero_share_at_max_concurrency_pct"), share, "%", src))
    kv = _num(top_row, "kv_usage_mean_pct")
    done, made = top.result.completed, top.result.total_output_tokens
    out_len = made / done if done and made else None
    if kv is not None and mean_r is not None and pool and top.input_len_tokens and out_len:
        theory = mean_kv_usage_theory_pct(mean_r, int(top.input_len_tokens), out_len, pool)
        out.append(
            fnd.measured(
                at("mean_kv_usage_at_max_concurrency_pct"), kv, "%", src, theory=theory, tolerance_pct=5.0
            )
        )
    return out


def _steps(s: SweepSeries, pts: list[BenchPoint], th: TheoryCtx) -> list[fnd.Finding]:
    """The last step's marginal throughput, and the decode step's growth from one stream to the highest
    concurrency (p50 ITL) beside the bandwidth floor's."""
    out: list[fnd.Finding] = []
    at = _at(s, "concurrency")
    rated = [p for p in pts if p.result.output_throughput_tok_s and p.concurrency]
    if len(rated) >= 2:
        lo, hi = rated[-2], rated[-1]
        v = marginal_throughput(
            int(lo.concurrency or 0),
            float(lo.result.output_throughput_tok_s or 0.0),
            int(hi.concurrency or 0),
            float(hi.result.output_throughput_tok_s or 0.0),
        )
        out.append(
            fnd.measured(
                at("marginal_throughput_last_step_tokens_per_s"),
                v,
                "tokens/s",
                [lo.cite(), hi.cite()],
                from_concurrency=lo.concurrency,
                to_concurrency=hi.concurrency,
            )
        )
    c1 = next((p for p in rated if p.concurrency == 1), None)
    if c1 is None or c1 is rated[-1]:
        return out
    top = rated[-1]
    a, b = c1.result.itl.p50_ms, top.result.itl.p50_ms
    if not a or not b:
        return out
    extra: dict[str, Any] = {"concurrency": top.concurrency}
    wb, kvb = s["weight_bytes_per_step"], s["kv_bytes_per_token"]
    bw = th.gpu.bandwidth_bytes_per_s if th.gpu else None
    if wb and kvb and bw and top.concurrency and top.input_len_tokens and top.requested_output_len_tokens:
        kv_req = mean_context_tokens(top.input_len_tokens, top.requested_output_len_tokens) * kvb
        f1, fn = roofline_floor_ms(wb, 1, kv_req, bw), roofline_floor_ms(wb, top.concurrency, kv_req, bw)
        extra["floor_growth_pct"] = growth_pct(f1, fn)
    out.append(
        fnd.measured(
            at("step_growth_single_to_max_pct"),
            growth_pct(a, b),
            "%",
            [c1.cite("median_itl_ms"), top.cite("median_itl_ms")],
            **extra,
        )
    )
    return out


def _sampler_cite(ctx: Context, p: BenchPoint) -> list[str]:
    """The sampler rows of a point's window (the file and its first and last line); the point itself when
    the window holds no sample (a point cut short before the next scrape)."""
    w = ctx.window(p)
    if w is None or not p.run.counter_source or w.last_row < w.first_row:
        return [p.cite()]
    return [ctx.sample_cite(p.run, w.first_row), ctx.sample_cite(p.run, w.last_row)]


def series_findings(
    s: SweepSeries, table: pd.DataFrame, campaign: Campaign, ctx: Context, th: TheoryCtx
) -> list[fnd.Finding]:
    """A sweep's findings: telemetry and queue at its highest concurrency, marginal and step growth."""
    pts: list[BenchPoint] = [p for p in s["points"] if not p.warmup]
    rows = [r for p in pts if (r := _row_of(table, p)) is not None]
    out = _steps(s, pts, th)
    if not pts or len(rows) != len(pts):
        return out
    pool, _ = pool_tokens(pts[-1].run, campaign)
    src = _sampler_cite(ctx, pts[-1])
    return _telemetry(s, pts[-1], rows, th, src) + _queue(s, pts[-1], rows[-1], pool, src) + out


def run(s: SectionInput) -> Section:
    campaign, ctx, th, points = s.campaign, s.ctx, s.th, s.points
    table = details_table(points, ctx)
    findings: list[fnd.Finding] = []
    for series in sweep_series(campaign, th):
        findings += series_findings(series, table, campaign, ctx, th)
    return Section(name="point_details", tables={"point_details": table}, findings=findings)
