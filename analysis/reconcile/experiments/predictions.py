"""The predictions of a knob experiment evaluated on its arms: per point the measurement [m − s, m + s]
against the plan's bound or value (``formulas.verdict``), combined over points, and one finding per
prediction citing the plan.toml line that stated it before the run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.loading.campaign import Campaign
from analysis.loading.rundocs import Ceilings
from analysis.reconcile import run_at
from analysis.reconcile.experiments.arms import ExpData, Slope, diff, label_point, slope_spread
from analysis.reconcile.experiments.formulas import INF, combine, ledger_itl_change_ms, verdict
from analysis.reconcile.experiments.spec import Prediction, Target, plan_cite
from analysis.reconcile.roofline import mean_context_tokens
from analysis.reconcile.theoryctx import TheoryCtx


@dataclass
class Evaluated:
    prediction: Prediction
    rows: list[dict[str, Any]]
    verdict: str


@dataclass(frozen=True)
class Measured:
    """A measurement at one point: value, spread (None: unknown) and whether the spread is borrowed."""

    m: float
    s: float | None
    borrowed: bool


def _ledger_value(th: TheoryCtx, pred: Prediction, e: ExpData, pid: tuple[Any, ...]) -> float | None:
    """The KV ledger's predicted step change at this point (see ``ledger_itl_change_ms``)."""
    if th.cfg is None or not isinstance(th.ceilings, Ceilings):
        return None
    t_kv = e.exp.arm(pred.arm).value
    b_kv = e.exp.arm(pred.versus).value if pred.versus else None
    if b_kv is None:
        return None
    out_len = pid[3] or 0
    return ledger_itl_change_ms(
        pid[1],
        mean_context_tokens(pid[2], out_len),
        theory.kv_bytes_per_token(th.cfg, t_kv),
        theory.kv_bytes_per_token(th.cfg, b_kv),
        th.ceilings.copy_bytes_per_s,
    )


def _measure(pred: Prediction, e: ExpData, pid: tuple[Any, ...]) -> Measured | None:
    """The predicted quantity at one point: an arm's metric, or its difference from the baseline arm."""
    if pred.quantity in ("p50_itl_delta_ms", "p50_itl_delta_pct"):
        d = diff(e, pred.arm, pred.versus or "", pid)
        if d is None:
            return None
        pct = pred.quantity.endswith("_pct")
        return (
            Measured(d.delta_pct, d.spread_pct, d.borrowed)
            if pct
            else Measured(d.delta, d.spread, d.borrowed)
        )
    ap = e.point(pred.arm, pid)
    m = ap.value(pred.quantity) if ap is not None else None
    if m is None:
        return None
    s, borrowed = e.spread(pred.arm, pid, pred.quantity)
    return Measured(m, s, borrowed)


def _target_rows(pred: Prediction, t: Target, e: ExpData, th: TheoryCtx) -> list[dict[str, Any]]:
    """One target's rows: each of the arm's points it names, measured and judged."""
    rows = []
    for pid in e.find(pred.arm, t):
        meas = _measure(pred, e, pid)
        if meas is None:
            continue
        kind, value = pred.kind, t.value
        if kind == "ledger":
            kind, value = "point", _ledger_value(th, pred, e, pid)
            if value is None:
                continue
        rows.append(_pred_row(pred, pid, meas, kind, (t.lo, t.hi, value)))
    return rows


def evaluate(pred: Prediction, e: ExpData, th: TheoryCtx, sl: dict[str, Slope]) -> Evaluated | None:
    rows: list[dict[str, Any]] = []
    if pred.arm not in e.arms or (pred.versus and pred.versus not in e.arms):
        return None
    for t in pred.targets:
        if pred.quantity != "itl_slope_ms_per_stream":
            rows += _target_rows(pred, t, e, th)
        elif pred.arm in sl:
            s, borrowed = slope_spread(sl, pred.arm)
            rows.append(
                _pred_row(pred, None, Measured(sl[pred.arm].value, s, borrowed), "bound", (t.lo, t.hi, None))
            )
    if not rows:
        return None
    return Evaluated(pred, rows, combine([r["verdict"] for r in rows]))


def _pred_row(
    pred: Prediction,
    pid: tuple[Any, ...] | None,
    meas: Measured,
    kind: str,
    bound: tuple[float, float, float | None],
) -> dict[str, Any]:
    lo, hi, value = bound
    m, s = meas.m, meas.s
    v = verdict(kind, m, s, lo, hi, value)
    return {
        "experiment": pred.experiment,
        "prediction": pred.name,
        "arm": pred.arm,
        "versus": pred.versus,
        "quantity": pred.quantity,
        "kind": kind,
        **(label_point(pid) if pid else {"test_kind": None, "concurrency": None, "input_len_tokens": None}),
        "predicted_lo": None if lo == -INF else lo,
        "predicted_hi": None if hi == INF else hi,
        "predicted_value": value,
        "measured": m,
        "spread": s,
        "spread_borrowed": meas.borrowed,
        "interval_lo": None if s is None else m - s,
        "interval_hi": None if s is None else m + s,
        "verdict": v,
    }


def _margin(r: dict[str, Any]) -> float:
    """How far a refuting point's interval lies from the prediction (units of the quantity)."""
    a, b = r["interval_lo"], r["interval_hi"]
    if a is None:
        return 0.0
    if r["kind"] == "point":
        off: float = max(r["predicted_value"] - b, a - r["predicted_value"])
        return off
    lo = -INF if r["predicted_lo"] is None else r["predicted_lo"]
    hi = INF if r["predicted_hi"] is None else r["predicted_hi"]
    outside: float = max(lo - b, a - hi)
    return outside


def _decisive(ev: Evaluated) -> dict[str, Any]:
    """The point that decides the verdict: the refuting point farthest from the prediction in units of its
    spread (the clearest refutation), else the first inconclusive point, else the first point."""
    refuting = [r for r in ev.rows if r["verdict"] == "refuted"]
    if refuting:
        return max(refuting, key=lambda r: _margin(r) / r["spread"] if r["spread"] else _margin(r))
    return next((r for r in ev.rows if r["verdict"] == "inconclusive"), ev.rows[0])


QUANTITY_UNITS = {
    "p50_itl_ms": "ms",
    "p50_itl_delta_ms": "ms",
    "p50_itl_delta_pct": "%",
    "output_throughput_tokens_per_s": "token/s",
    "itl_slope_ms_per_stream": "ms/request",
}


def cites(e: ExpData, arms: Sequence[str | None], pid: tuple[Any, ...] | None) -> list[str]:
    """The citations of the arms' points (requests.jsonl#point of each repeat); every point without a pid."""
    out = []
    for arm in arms:
        if not arm or arm not in e.arms:
            continue
        for q in e.pids(arm):
            ap = e.point(arm, q)
            if ap is not None and (pid is None or q[:3] == pid[:3]):
                out += [p.cite() for p in ap.points.values()]
    return out


def prediction_finding(ev: Evaluated, e: ExpData, campaign: Campaign) -> fnd.Finding:
    pred = ev.prediction
    ar = e.arms[pred.arm]
    at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
    d = _decisive(ev)
    plan_src = plan_cite(campaign, pred.plan)
    srcs = [plan_src]
    for r in ev.rows:
        pid = None if r["concurrency"] is None else (r["test_kind"], r["concurrency"], r["input_len_tokens"])
        srcs += cites(e, (pred.arm, pred.versus), pid)
    return fnd.Finding(
        at=at(pred.name),
        value=d["measured"],
        unit=QUANTITY_UNITS[pred.quantity],
        sources=tuple(dict.fromkeys(srcs)),
        status="mismatch" if ev.verdict == "refuted" else "ok",
        detail=f"plan: {pred.stated}",
        extra={
            "verdict": ev.verdict,
            "experiment": pred.experiment,
            "quantity": pred.quantity,
            "kind": d["kind"],
            "baseline_arm": pred.versus,
            "concurrency": d["concurrency"],
            "input_len_tokens": d["input_len_tokens"],
            "predicted_lo": d["predicted_lo"],
            "predicted_hi": d["predicted_hi"],
            "predicted_value": d["predicted_value"],
            "spread": d["spread"],
            "spread_borrowed": d["spread_borrowed"],
            "interval_lo": d["interval_lo"],
            "interval_hi": d["interval_hi"],
            "points": [
                {
                    k: r[k]
                    for k in (
                        "concurrency",
                        "input_len_tokens",
                        "measured",
                        "spread",
                        "predicted_value",
                        "verdict",
                    )
                }
                for r in ev.rows
            ],
            "plan_source": plan_src,
        },
    )
