"""Self-check gates: per benchmark point, pass/fail/unknown with the reason and the file it rests on.

A point that fails a gate stays in every table (column `gate_ok` = false) and every figure (drawn
differently, with a legend saying so); findings list the points they rest on. `unknown` (the campaign
kept no file to check against) never fails a point but is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis import findings as fnd
from analysis.campaign import BenchPoint, Campaign, iter_points
from analysis.reconcile import Context, Section

GATE_ORDER = ("completed", "no_failures", "output_tokens", "greedy", "prefix_caching_off", "no_preemptions", "fingerprint")
# A failed `exclude` gate means the point measured a different workload or server (fewer requests, a
# cache that skips prefill, preemptions in a run meant to have none): conclusions leave it out. A failed
# `flag` gate is a weaker protocol lapse (no fingerprint, sampling not forced greedy — output length is
# fixed by ignore-eos either way — or a small output shortfall reported by its own finding): the point is
# used and every conclusion resting on it lists it.
SEVERITY = {
    "completed": "exclude",
    "no_failures": "exclude",
    "prefix_caching_off": "exclude",
    "no_preemptions": "exclude",
    "output_tokens": "flag",
    "greedy": "flag",
    "fingerprint": "flag",
}


@dataclass(frozen=True)
class GateResult:
    gate: str
    status: str  # "pass" | "fail" | "unknown"
    reason: str | None  # labels_zh.REASONS code when not pass
    source: str | None
    detail: str


def gate_completed(num_prompts: int | None, completed: int) -> bool:
    """completed == num_prompts (every request sent came back)."""
    return num_prompts is None or completed == num_prompts


def gate_output_tokens(total_output_tokens: int, completed: int, requested_output_len: int) -> bool:
    """total_output_tokens == completed × requested output length (ignore-eos honoured)."""
    return total_output_tokens == completed * requested_output_len


def prefix_caching_enabled(run) -> tuple[bool | None, str | None]:
    """What the server log says about prefix caching: (enabled?, citation); (None, None) if it does not.
    vLLM states it in its engine-config line; llama.cpp's start-up excerpt does not."""
    rel, log = run.server_log
    if log is None:
        return None, None
    cfg = getattr(log, "engine_config", None)
    if cfg is not None and cfg.enable_prefix_caching is not None:
        return bool(cfg.enable_prefix_caching), run.cite(rel, cfg.line)
    return None, run.cite(rel)


def evaluate_point(p: BenchPoint, ctx: Context) -> list[GateResult]:
    r = p.result
    out: list[GateResult] = []
    ok = gate_completed(r.num_prompts, r.completed)
    out.append(GateResult("completed", "pass" if ok else "fail", None if ok else "completed_below_requested",
                          p.cite("completed"), f"{r.completed}/{r.num_prompts}"))
    failed = r.failed or 0
    out.append(GateResult("no_failures", "pass" if failed == 0 else "fail", None if failed == 0 else "failed_requests",
                          p.cite("failed"), f"failed={failed}"))
    if p.requested_output_len_tokens is None or r.total_output_tokens is None:
        out.append(GateResult("output_tokens", "unknown", "no_sweep_log", p.cite("total_output_tokens"),
                              "requested output length unknown"))
    else:
        want = r.completed * p.requested_output_len_tokens
        ok = gate_output_tokens(r.total_output_tokens, r.completed, p.requested_output_len_tokens)
        out.append(GateResult("output_tokens", "pass" if ok else "fail", None if ok else "output_tokens_short",
                              p.cite("total_output_tokens"), f"{r.total_output_tokens}/{want}"))
    if p.sweep_point is None:
        out.append(GateResult("greedy", "unknown", "no_sweep_log", None, "no client log kept for this run"))
    else:
        t = p.sweep_point.namespace.get("temperature")
        ok = t == 0
        sweep_rel, _ = p.run.sweep
        out.append(GateResult("greedy", "pass" if ok else "fail", None if ok else "temperature_not_zero",
                              p.run.cite(sweep_rel, p.sweep_point.namespace_line), f"temperature={t!r}"))
    enabled, src = prefix_caching_enabled(p.run)
    if enabled is None:
        out.append(GateResult("prefix_caching_off", "unknown", "no_server_log", src, "server log does not say"))
    else:
        out.append(GateResult("prefix_caching_off", "fail" if enabled else "pass",
                              "prefix_caching_on" if enabled else None, src, f"prefix_caching={enabled}"))
    w = ctx.window(p)
    if w is None or w.delta("preemptions") is None:
        out.append(GateResult("no_preemptions", "unknown", "no_sampler_csv", None, "no counter for this point"))
    else:
        n = w.delta("preemptions")
        overload = p.run.test_kind == "overload"
        ok = overload or n == 0
        srel, _ = p.run.sampler
        out.append(GateResult("no_preemptions", "pass" if ok else "fail",
                              None if ok else "preemptions_outside_overload", p.run.cite(srel, "preemptions"),
                              f"preemptions={n:g}" + (" (overload run: expected)" if overload else "")))
    frel, fp = p.run.fingerprint
    out.append(GateResult("fingerprint", "pass" if fp is not None else "fail", None if fp is not None else "no_fingerprint",
                          p.run.cite(frel) if frel else None, "present" if fp is not None else "missing"))
    return out


def evaluate(campaign: Campaign, ctx: Context) -> None:
    """Fill ctx.gates for every point (warm-ups included: they are flagged like any other)."""
    for p in iter_points(campaign, include_warmup=True):
        ctx.gates[p.key] = evaluate_point(p, ctx)


def run(campaign: Campaign, ctx: Context) -> Section:
    rows = []
    for p in iter_points(campaign, include_warmup=True):
        for g in ctx.gates[p.key]:
            rows.append({
                "round": p.run.round or "", "engine": p.run.engine, "test": p.run.test, "point": p.label,
                "warmup": p.warmup, "gate": g.gate, "severity": SEVERITY[g.gate], "status": g.status, "reason": g.reason or "",
                "detail": g.detail, "source": g.source or "",
            })
    table = pd.DataFrame(rows, columns=["round", "engine", "test", "point", "warmup", "gate", "severity", "status", "reason",
                                        "detail", "source"])
    findings: list[fnd.Finding] = []
    for rnd in campaign.rounds:
        pts = [p for p in iter_points(campaign, include_warmup=True) if p.run.round == rnd]
        failed = sorted(f"{p.run.test}/{p.label}" for p in pts if not ctx.gate_ok(p))
        flagged = sorted(f"{p.run.test}/{p.label}" for p in pts if ctx.gate_flags(p))
        unknown = sorted({g.gate for p in pts for g in ctx.gates[p.key] if g.status == "unknown"})
        pre = campaign.prefix(rnd)
        srcs = [g.source for p in pts for g in ctx.gates[p.key] if g.status == "fail" and g.source]
        findings.append(fnd.measured(f"{pre}gates.points_total", len(pts), "count", [p.cite() for p in pts][:1]))
        findings.append(fnd.Finding(
            key=f"{pre}gates.points_failed", value=failed, unit="list", sources=tuple(srcs),
            status="ok" if not failed else "mismatch",
            detail="points failing an exclude-severity gate: kept in tables and figures, left out of conclusions",
        ))
        findings.append(fnd.measured(f"{pre}gates.points_flagged", flagged, "list", [],
                                     detail="points failing only flag-severity gates: used, and listed"))
        findings.append(fnd.measured(f"{pre}gates.points_failed_count", len(failed), "count", srcs))
        findings.append(fnd.measured(f"{pre}gates.gates_unknown", unknown, "list", [],
                                     detail="gates that could not be checked for some point (file missing)"))
        by_gate = {}
        for gate in GATE_ORDER:
            res = [g for p in pts for g in ctx.gates[p.key] if g.gate == gate]
            by_gate[gate] = {
                "pass": sum(g.status == "pass" for g in res),
                "fail": sum(g.status == "fail" for g in res),
                "unknown": sum(g.status == "unknown" for g in res),
            }
        findings.append(fnd.measured(f"{pre}gates.all_passed", not failed and not flagged, "bool", srcs, by_gate=by_gate,
                                     severity=SEVERITY))
    return Section(name="gates", tables={"gates": table}, findings=findings)
