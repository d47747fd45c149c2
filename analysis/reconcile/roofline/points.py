"""The roofline section: every sweep point against its floor, from the datasheet AND the card's measured
ceilings, side by side (table ``roofline_points``, one shape for every campaign, so the cross-campaign
comparison reads the same columns from each); knee, single stream, peak and roofline achievement per own
run; the quantization speed-up between two weight formats of one engine (``quantization``).

llama.cpp's own per-token time, Δtokens_predicted_seconds_total ÷ Δtokens_predicted_total between the
point's boundary scrapes, is kept beside the client's p50 ITL.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint, RunData
from analysis.reconcile import Context, Section, SectionInput, run_at
from analysis.reconcile.concurrency import knee_finding, peak_throughput_finding, throughput_gain_finding
from analysis.reconcile.roofline.quantization import quantization_findings
from analysis.reconcile.roofline.series import (
    SweepSeries,
    achievement_pct,
    kv_bytes_per_request,
    roofline_floor_ms,
    server_token_ms,
    step_bytes,
    sweep_series,
)
from analysis.reconcile.theoryctx import TheoryCtx


def _point_row(s: SweepSeries, p: BenchPoint, ctx: Context, th: TheoryCtx) -> dict[str, Any]:
    """One sweep point of the table roofline_points: its latencies, and its floors and achievement against
    the datasheet's and the measured bandwidth."""
    r = p.result
    mean_out = (
        r.total_output_tokens / r.completed if r.completed and r.total_output_tokens is not None else None
    )
    row: dict[str, Any] = {
        "series": s["series"],
        "round": s["round"],
        "run": s["run"],
        "engine": s["engine"],
        "weight_format": s["weight_format"],
        "test_kind": p.test_kind,
        "concurrency": p.concurrency,
        "gate_ok": ctx.gate_ok(p),
        "input_len_tokens": p.input_len_tokens,
        "mean_output_tokens_per_request": mean_out,
        "p50_itl_ms": r.itl.p50_ms,
        "p99_itl_ms": r.itl.p99_ms,
        "mean_tpot_ms": r.tpot.mean_ms,
        "output_throughput_tokens_per_s": r.output_throughput_tok_s,
        "source": p.cite("p50_itl_ms"),
    }
    wb = s["weight_bytes_per_step"]
    kv_req = kv_bytes_per_request(s, p)
    if wb is not None and kv_req is not None and p.concurrency is not None:
        row["bytes_per_step"] = step_bytes(s, p)
        for tag, bw in (
            ("datasheet", th.gpu.bandwidth_bytes_per_s if th.gpu else None),
            ("measured", th.ceilings.copy_bytes_per_s if th.ceilings else None),
        ):
            if bw and row["p50_itl_ms"]:
                floor = roofline_floor_ms(wb, p.concurrency, kv_req, bw)
                row[f"floor_{tag}_ms"] = floor
                row[f"achievement_{tag}_pct"] = achievement_pct(floor, row["p50_itl_ms"])
                row[f"bandwidth_{tag}_bytes_per_s"] = bw
    w = ctx.window(p)
    if w is not None:
        tok = server_token_ms(w.delta("predicted_s"), w.delta("predicted_tokens"))
        if tok is not None:
            row["server_token_ms"] = tok
    return row


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    rows: list[dict[str, Any]] = []
    series = sweep_series(campaign, th)
    for ser in series:
        s_rows = [_point_row(ser, p, ctx, th) for p in ser["points"]]
        rows += s_rows
        run = ser["points"][0].run
        if not run.own:
            continue  # imported campaigns state these under their legacy keys (concurrency, engines)
        findings += _own_series_findings(run, ser, s_rows, ctx, th)
    if any(r.own for r in campaign.runs):
        findings += quantization_findings(series, rows, th)
    cols = [
        "series",
        "round",
        "run",
        "engine",
        "weight_format",
        "concurrency",
        "gate_ok",
        "p50_itl_ms",
        "output_throughput_tokens_per_s",
    ]
    return Section(
        name="roofline",
        tables={"roofline_points": pd.DataFrame(rows, columns=None if rows else cols)},
        findings=findings,
    )


def _own_series_findings(
    run: RunData, s: SweepSeries, s_rows: list[dict[str, Any]], ctx: Context, th: TheoryCtx
) -> list[fnd.Finding]:
    pre = run_at(run, s["weight_format"])
    pts: list[BenchPoint] = s["points"]
    out: list[fnd.Finding] = []
    out.append(knee_finding(pre, pts, ctx))
    out.append(peak_throughput_finding(pre, pts, ctx))
    c1 = next((p for p in pts if p.concurrency == 1), None)
    out.append(throughput_gain_finding(pre, c1, [p for p in pts if ctx.gate_ok(p)], {}))
    first = min(s_rows, key=lambda r: r["concurrency"])
    out.append(_single_stream_finding(pre, s_rows))
    for tag, reason, why in (
        ("datasheet", "no_gpu_datasheet", th.gpu_reason or "no GPU datasheet for this campaign"),
        ("measured", "no_measured_ceiling", "no ceilings.json in the campaign"),
    ):
        key = pre(
            "roofline_achievement_pct" if tag == "datasheet" else "roofline_achievement_measured_ceiling_pct"
        )
        have = [r for r in s_rows if r.get(f"achievement_{tag}_pct") is not None]
        if s["weight_bytes_per_step"] is None:
            out.append(
                fnd.not_available(
                    key, "%", "no_theory", th.model_reason or "no model config or weight format"
                )
            )
        elif not have:
            out.append(fnd.not_available(key, "%", reason, why, [first["source"]]))
        else:
            h0 = min(have, key=lambda r: r["concurrency"])
            bw_src = th.gpu_source if tag == "datasheet" else th.ceilings_source
            out.append(
                fnd.measured(
                    key,
                    h0[f"achievement_{tag}_pct"],
                    "%",
                    [h0["source"], s["format_source"], *bw_src, *th.model_source],
                    concurrency=h0["concurrency"],
                    floor_ms=h0[f"floor_{tag}_ms"],
                    p50_itl_ms=h0["p50_itl_ms"],
                    bandwidth_bytes_per_s=h0[f"bandwidth_{tag}_bytes_per_s"],
                    by_concurrency={str(int(r["concurrency"])): r[f"achievement_{tag}_pct"] for r in have},
                    detail=f"floor ({tag} bandwidth) ÷ measured p50 ITL at the lowest concurrency; table "
                    "roofline_points has every point",
                )
            )
    return out


def _single_stream_finding(pre: At, s_rows: list[dict[str, Any]]) -> fnd.Finding:
    """p50 ITL at the series' lowest concurrency with one; n/a when no point completed a request with an ITL
    (the server died, the run was stopped)."""
    timed = [r for r in s_rows if r["p50_itl_ms"] is not None]
    if not timed:
        first = min(s_rows, key=lambda r: r["concurrency"])
        why = "no point completed a request with a second token: no ITL"
        return fnd.not_available(pre("single_stream_p50_itl_ms"), "ms", "point_cut", why, [first["source"]])
    first = min(timed, key=lambda r: r["concurrency"])
    return fnd.measured(
        pre("single_stream_p50_itl_ms"),
        first["p50_itl_ms"],
        "ms",
        [first["source"]],
        concurrency=first["concurrency"],
        floor_datasheet_ms=first.get("floor_datasheet_ms"),
        floor_measured_ms=first.get("floor_measured_ms"),
        server_token_ms=first.get("server_token_ms"),
        output_throughput_tokens_per_s=first["output_throughput_tokens_per_s"],
    )
