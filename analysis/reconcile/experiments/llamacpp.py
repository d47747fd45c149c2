"""What llama.cpp's server.log adds to the slot and KV-quantization experiments: the KV buffer against −c ×
KV bytes per token of the plan's cache type and the per-slot context against −c ÷ −np (both exact), and the
slot ids each point's requests took (``launch_slot_`` lines) behind the concurrency-32 anomaly."""

from __future__ import annotations

from typing import Any

from analysis.core import findings as fnd
from analysis.core import theory
from analysis.core.model_config import ModelConfig
from analysis.loading.campaign import RunData
from analysis.reconcile import run_at
from analysis.reconcile.experiments.arms import ArmRuns, ExpData, diff
from analysis.reconcile.experiments.formulas import (
    LOG_MIB_RESOLUTION,
    consecutive_runs,
    kv_buffer_mib,
    verdict,
)
from analysis.reconcile.experiments.predictions import cites
from analysis.reconcile.experiments.spec import Knob, Target
from analysis.reconcile.theoryctx import TheoryCtx


def slot_runs_by_point(run: RunData) -> dict[str, tuple[list[int], int, str]] | None:
    """Per point label: the slot ids its requests took (server.log ``launch_slot_ … processing task`` lines),
    how many runs of consecutive ids they form, and the citation of the point's first launch line. Launches
    follow the requests' arrival and the points run one after another (the next point starts when the last one
    has drained), so the launches, in log order, split into the points by their request counts. None when the
    log has no launch lines or their count differs from the requests'."""
    rel, log = run.server_log
    _, req = run.requests
    launches = getattr(log, "launches", None)
    if not launches or req is None or rel is None:
        return None
    counts: dict[tuple[int, str], int] = {}
    for r in req.records:
        counts[(r.point_index, r.point)] = counts.get((r.point_index, r.point), 0) + 1
    if sum(counts.values()) != len(launches):
        return None
    out: dict[str, tuple[list[int], int, str]] = {}
    i = 0
    for (_, label), n in sorted(counts.items()):
        chunk = launches[i : i + n]
        i += n
        ids = sorted(x.slot_id for x in chunk)
        out[label] = (ids, consecutive_runs(ids), run.cite(rel, chunk[0].line))
    return out


def buffer_findings(e: ExpData, th: TheoryCtx, rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    """Per run: llama.cpp's KV buffer (log) against −c × KV bytes per token of the plan's cache type, and the
    per-slot context (log) against −c ÷ −np; both exact."""
    out: list[fnd.Finding] = []
    if th.cfg is None:
        return out
    for arm, ar in sorted(e.arms.items()):
        for k, run in sorted(ar.runs.items()):
            out += _run_buffer_findings(e, (arm, ar, k), run, th.cfg, rows)
    return out


def _run_buffer_findings(
    e: ExpData, where: tuple[str, ArmRuns, int], run: RunData, cfg: ModelConfig, rows: list[dict[str, Any]]
) -> list[fnd.Finding]:
    """One run's KV buffer and per-slot context findings (``buffer_findings``); ``where``: (arm, its runs,
    the repeat)."""
    arm, ar, k = where
    out: list[fnd.Finding] = []
    rel, log = run.server_log
    plan = run.docs.plan
    if log is None or plan is None or rel is None:
        return out
    args = list(plan.server.args)
    n_ctx = int(Knob("arg", "-c").value(plan) or 0)
    n_par = int(Knob("arg", "-np").value(plan) or 1)
    kv_type = Knob("arg", "-ctk", default="f16").value(plan) or "f16"
    kvb = theory.kv_bytes_per_token(cfg, kv_type)
    at = run_at(run, ar.arm.weight_format, topic=e.exp.topic)
    plan_src = run.cite("plan.toml")
    kv_lines = [b for b in log.buffers if b.kind == "KV"]
    if n_ctx and kv_lines:
        pred = kv_buffer_mib(n_ctx, kvb)
        got = log.kv_buffer_mib
        out.append(
            fnd.measured(
                at("kv_buffer_mib"),
                got,
                "MiB",
                [run.cite(rel, b.line) for b in kv_lines] + [plan_src],
                theory=pred,
                tolerance_pct=LOG_MIB_RESOLUTION / pred * 100.0,
                detail=("llama.cpp KV buffer (log) vs -c x KV bytes per token of -ctk/-ctv (block formats)"),
                verdict=verdict("exact", got, None, value=pred),
                n_ctx_tokens=n_ctx,
                kv_type=kv_type,
                kv_bytes_per_token=kvb,
                repeat=k,
            )
        )
        rows.append(
            {
                "experiment": e.exp.name,
                "arm": arm,
                "variant": ar.arm.variant,
                "run": run.name,
                "n_ctx_tokens": n_ctx,
                "slots": n_par,
                "kv_type": kv_type,
                "kv_bytes_per_token": kvb,
                "kv_buffer_mib_theory": pred,
                "kv_buffer_mib_log": got,
                "source": run.cite(rel, kv_lines[0].line),
            }
        )
    if n_ctx and log.n_ctx_slot is not None and "-np" in args:
        out.append(
            fnd.measured(
                at("ctx_per_slot_tokens"),
                log.n_ctx_slot,
                "tokens",
                [run.cite(rel, log.lines.get("n_ctx_slot")), plan_src],
                theory=n_ctx / n_par,
                tolerance_pct=0.0,
                detail="per-slot context (log n_ctx_slot) vs -c / -np",
                verdict=verdict("exact", float(log.n_ctx_slot), None, value=n_ctx / n_par),
                slots=n_par,
                repeat=k,
            )
        )
    return out


def _slot_evidence(e: ExpData, rows: list[dict[str, Any]]) -> dict[tuple[str, int, int], tuple[int, str]]:
    """Per (arm, repeat, concurrency) of one-wave points: runs of consecutive busy slot ids and the
    citation."""
    found: dict[tuple[str, int, int], tuple[int, str]] = {}
    for arm, ar in sorted(e.arms.items()):
        for k, run in sorted(ar.runs.items()):
            by_label = slot_runs_by_point(run)
            if by_label is None:
                continue
            for p in run.points:
                if p.warmup or p.label not in by_label:
                    continue
                ids, n_runs, cite = by_label[p.label]
                one_wave = p.result.num_prompts is not None and p.result.num_prompts <= (p.concurrency or 0)
                rows.append(
                    {
                        "experiment": e.exp.name,
                        "arm": arm,
                        "variant": ar.arm.variant,
                        "run": run.name,
                        "repeat": k,
                        "weight_format": ar.arm.weight_format,
                        "concurrency": p.concurrency,
                        "requests": len(ids),
                        "one_wave": one_wave,
                        "slot_id_min": ids[0],
                        "slot_id_max": ids[-1],
                        "busy_slot_runs": n_runs if one_wave else None,
                        "source": cite,
                    }
                )
                if one_wave and p.concurrency is not None:
                    found[(arm, k, int(p.concurrency))] = (n_runs, cite)
    return found


def slots_findings(e: ExpData, slot_rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    """The concurrency-32 anomaly: -np 64 slower than -np 256, the difference beside its spread, and the busy
    slot ids of each arm at that point (how many runs of consecutive ids)."""
    out: list[fnd.Finding] = []
    ev = _slot_evidence(e, slot_rows)
    for treatment, baseline in e.exp.pairs:
        for pid in e.find(treatment, Target(concurrency=32)):
            d = diff(e, treatment, baseline, pid)
            if d is None:
                continue
            ar = e.arms[treatment]
            at = run_at(ar.first, ar.arm.weight_format, topic=e.exp.topic)
            runs_t = {
                k: ev[(treatment, k, 32)][0] for k in e.arms[treatment].runs if (treatment, k, 32) in ev
            }
            runs_b = {k: ev[(baseline, k, 32)][0] for k in e.arms[baseline].runs if (baseline, k, 32) in ev}
            slot_cites = [
                ev[(a, k, 32)][1] for a in (treatment, baseline) for k in e.arms[a].runs if (a, k, 32) in ev
            ]
            out.append(
                fnd.measured(
                    at("c32_p50_itl_delta_pct"),
                    d.delta_pct,
                    "%",
                    cites(e, (treatment, baseline), pid) + slot_cites,
                    detail="p50 ITL at concurrency 32, -np 64 vs -np 256 (mean over repeats), with the "
                    "repeat spread; busy slot ids from server.log launch_slot_ lines",
                    spread_pct=d.spread_pct,
                    spread_borrowed=d.borrowed,
                    distinguishable=d.distinguishable,
                    treatment_ms=d.treatment.value("p50_itl_ms"),
                    baseline_ms=d.baseline.value("p50_itl_ms"),
                    busy_slot_runs=[runs_t[k] for k in sorted(runs_t)],
                    busy_slot_runs_baseline=[runs_b[k] for k in sorted(runs_b)],
                )
            )
    return out
