"""Issue #26: the ladder page's chat-endpoint lead tested. The ladder's baseline arm (``ladder.ARMS[0]``, chat
endpoint, prompts as decoded text) against the same plan on ``/v1/completions`` with the prompts as token ids
(``COMPLETIONS``, plans/h200-ladder-0-completions.toml; the only change is the endpoint). The lead: with the
server saturated the chat arms kept the GPU busy only 56–69 % of the time and output plateaued whatever the
step, so the chat endpoint's per-token host work would cap every arm.

Per endpoint (each arm's runs, mean and spread max − min over repeats, ``ladder.LadderArm``): maximum goodput,
``gpu_busy_pct`` (``ladder.gpu_busy_pct``: the rate points from ``ladder.BUSY_FROM_RATE`` up), the output
plateau (the highest output tokens/s over the rates) and p50 ITL at ``ITL_RATE`` (below saturation).
``completions ÷ chat`` ratios of each, with the relative spread (the larger of the two arms' relative
spreads). The completions plan's ``# PREDICT`` lines (``goodput_max_req_s``, ``gpu_busy_pct``,
``p50_itl_ratio_vs_chat_at_<rate>``) are judged by ``experiments.verdict`` on [m − s, m + s].
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.reconcile import Section, SectionInput
from analysis.reconcile import ladder as lad

NAME = "ladder_endpoint"
TOPIC = "ladder_endpoint"
COMPLETIONS = "ladder-0-completions"
LEAD_NEEDS = ("gpu_busy_pct", "goodput_max_req_s")  # what completions must raise for the lead to hold
ITL_RATE = 3.0  # req/s: the one offered rate every arm held (below saturation)
ITL_RATIO = re.compile(r"^p50_itl_ratio_vs_chat_at_(?P<rate>[0-9.]+)$")
# per endpoint: (column, what of one run, unit)
MEASURES = {
    "goodput_max_req_s": (lambda rr: rr.goodput_max, "req/s"),
    "gpu_busy_pct": (lambda rr: rr.gpu_busy_pct, "%"),
    "output_plateau_tok_s": (lambda rr: max(r["output_throughput_tok_s"] or 0.0 for r in rr.rows), "tok/s"),
    "p50_itl_at_3_ms": (lambda rr: (row := rr.row_at(ITL_RATE)) and row["p50_itl_ms"], "ms"),
}


def ratio_spread(m1: float, s1: float | None, m0: float, s0: float | None) -> tuple[float, float | None]:
    """(m1 ÷ m0, its spread): the ratio times the larger relative repeat spread of the two arms (None when
    neither arm was repeated)."""
    rels = [s / m for s, m in ((s1, m1), (s0, m0)) if s is not None and m]
    r = m1 / m0
    return r, (r * max(rels)) if rels else None


def _rows(chat: lad.LadderArm, comp: lad.LadderArm) -> list[dict[str, Any]]:
    rows = []
    for endpoint, arm in (("chat", chat), ("completions", comp)):
        row: dict[str, Any] = {
            "endpoint": endpoint,
            "arm": arm.name,
            "runs": ", ".join(rr.run.name for rr in arm.runs),
        }
        for col, (fn, _unit) in MEASURES.items():
            row[col], row[f"{col}_spread"] = arm.mean_spread(fn)
        rows.append(row)
    return rows


def _ratio_findings(
    rows: list[dict[str, Any]], chat: lad.LadderArm, comp: lad.LadderArm
) -> list[fnd.Finding]:
    c0, c1 = rows
    srcs = [r["source"] for a in (chat, comp) for rr in a.runs for r in rr.rows]
    at = At(level="run", run=COMPLETIONS, engine="llamacpp", weight_format="q4_k_m", topic=TOPIC)
    out = []
    for col, (_fn, unit) in MEASURES.items():
        if c0[col] is None or c1[col] is None:
            continue
        out.append(
            fnd.measured(
                at(f"{col}"),
                c1[col],
                unit,
                srcs,
                spread=c1[f"{col}_spread"],
                chat=c0[col],
                chat_spread=c0[f"{col}_spread"],
                runs=c1["runs"],
                chat_runs=c0["runs"],
            )
        )
        if c0[col]:
            r, s = ratio_spread(c1[col], c1[f"{col}_spread"], c0[col], c0[f"{col}_spread"])
            v = None if s is None else lad.step_verdict(r, s / r)
            out.append(fnd.measured(at(f"{col}_ratio"), r, "x", srcs, spread=s, verdict=v))
    verdicts = {f.at.metric: f.extra.get("verdict") for f in out}
    # the lead holds when completions lifts both the GPU's busy share and the goodput beyond the spread
    holds = all(verdicts.get(f"{c}_ratio") == "paid" for c in LEAD_NEEDS)
    out.append(
        fnd.measured(
            at("chat_endpoint_caps"),
            holds,
            "",
            srcs,
            needs=list(LEAD_NEEDS),
            verdicts={c: verdicts.get(f"{c}_ratio") for c in LEAD_NEEDS},
        )
    )
    return out


def _measure(quantity: str, rows: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    c0, c1 = rows
    if quantity in ("goodput_max_req_s", "gpu_busy_pct"):
        return c1[quantity], c1[f"{quantity}_spread"]
    m = ITL_RATIO.match(quantity)
    if m and float(m["rate"]) == ITL_RATE and c0["p50_itl_at_3_ms"] and c1["p50_itl_at_3_ms"] is not None:
        return ratio_spread(
            c1["p50_itl_at_3_ms"],
            c1["p50_itl_at_3_ms_spread"],
            c0["p50_itl_at_3_ms"],
            c0["p50_itl_at_3_ms_spread"],
        )
    return None, None


def _prediction_rows(comp: lad.LadderArm, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for pr in lad.plan_predictions(comp.runs[0].run, COMPLETIONS):
        out.append(lad.prediction_row(pr, *_measure(pr.quantity, rows)))
    return out


def _prediction_findings(rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    at = At(level="run", run=COMPLETIONS, engine="llamacpp", topic=TOPIC)
    return [lad.predicted(at(f"predicted_{r['quantity']}"), r) for r in rows]


def run(s: SectionInput) -> Section:
    campaign, ctx = s.campaign, s.ctx
    if campaign.name != lad.H200:
        return Section(name=NAME)
    chat, comp = lad.arm_of(campaign, ctx, lad.ARMS[0]), lad.arm_of(campaign, ctx, COMPLETIONS)
    if chat is None or comp is None:
        return Section(name=NAME)
    rows = _rows(chat, comp)
    preds = _prediction_rows(comp, rows)
    tables = {"ladder_endpoint": rows, "ladder_endpoint_predictions": preds}
    return Section(
        name=NAME,
        tables={k: pd.DataFrame(v) for k, v in tables.items() if v},
        findings=[*_ratio_findings(rows, chat, comp), *_prediction_findings(preds)],
    )
