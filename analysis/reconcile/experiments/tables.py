"""The experiments' tidy tables: each run of each arm (with its knob value from its plan.toml), each point of
each run, each arm at each point (mean and repeat spread), and each difference an experiment is about."""

from __future__ import annotations

from typing import Any

from analysis.reconcile import Context
from analysis.reconcile.experiments.arms import ExpData, diff, label_point, point_metrics
from analysis.reconcile.experiments.formulas import spread_pct


def run_rows(e: ExpData) -> list[dict[str, Any]]:
    """Per arm and repeat: the run, the knob value its plan.toml states and the arm's expected value."""
    rows = []
    for arm, ar in sorted(e.arms.items()):
        for k, r in sorted(ar.runs.items()):
            rows.append(
                {
                    "experiment": e.exp.name,
                    "item": e.exp.item,
                    "arm": arm,
                    "variant": ar.arm.variant,
                    "run": r.name,
                    "repeat": k,
                    "weight_format": ar.arm.weight_format,
                    "knob": e.exp.knob.name,
                    "knob_value": ar.knob_values.get(k),
                    "expected_value": ar.arm.value,
                    "source": r.cite("plan.toml"),
                    "definition_source": ar.arm.source,
                }
            )
    return rows


def points_rows(e: ExpData, ctx: Context) -> list[dict[str, Any]]:
    rows = []
    for (arm, pid), ap in sorted(e.at.items(), key=lambda x: (x[0][0], x[0][1])):
        for k, p in sorted(ap.points.items()):
            m = point_metrics(p)
            rows.append(
                {
                    "experiment": e.exp.name,
                    "arm": arm,
                    "variant": ap.arm.arm.variant,
                    "run": p.run.name,
                    "repeat": k,
                    "engine": p.run.engine,
                    "weight_format": ap.arm.arm.weight_format,
                    **label_point(pid),
                    **m,
                    "gate_ok": ctx.gate_ok(p),
                    "source": p.cite(),
                }
            )
    return rows


def arm_rows(e: ExpData) -> list[dict[str, Any]]:
    rows = []
    for (arm, pid), ap in sorted(e.at.items(), key=lambda x: (x[0][0], x[0][1])):
        row = {
            "experiment": e.exp.name,
            "arm": arm,
            "variant": ap.arm.arm.variant,
            "weight_format": ap.arm.arm.weight_format,
            **label_point(pid),
            "runs": len(ap.points),
        }
        for m in ("p50_itl_ms", "output_throughput_tokens_per_s"):
            v = ap.value(m)
            s, borrowed = e.spread(arm, pid, m)
            row[m] = v
            row[f"{m}_spread"] = s
            row[f"{m}_spread_pct"] = spread_pct(s, v) if s is not None and v else None
            row[f"{m}_spread_borrowed"] = borrowed
        rows.append(row)
    return rows


def diff_rows(e: ExpData) -> list[dict[str, Any]]:
    rows = []
    for treatment, baseline in e.exp.pairs:
        for pid in e.pids(treatment):
            for metric in ("p50_itl_ms", "output_throughput_tokens_per_s"):
                d = diff(e, treatment, baseline, pid, metric)
                if d is None:
                    continue
                rows.append(
                    {
                        "experiment": e.exp.name,
                        "arm": treatment,
                        "versus": baseline,
                        "variant": e.exp.arm(treatment).variant,
                        "versus_variant": e.exp.arm(baseline).variant,
                        "weight_format": e.exp.arm(treatment).weight_format,
                        **label_point(pid),
                        "metric": metric,
                        "treatment": d.treatment.value(metric),
                        "baseline": d.baseline.value(metric),
                        "delta": d.delta,
                        "delta_pct": d.delta_pct,
                        "spread": d.spread,
                        "spread_pct": d.spread_pct,
                        "spread_borrowed": d.borrowed,
                        "distinguishable": d.distinguishable,
                    }
                )
    return rows
