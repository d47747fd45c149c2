"""Reproducibility: per-point throughput deltas between rounds (and between repeat sweeps of one round),
and what changed between the rounds (pool size, driver, CUDA, client arguments)."""

from __future__ import annotations

import pandas as pd

from analysis import findings as fnd
from analysis import fits
from analysis.campaign import BenchPoint, Campaign
from analysis.keys import At
from analysis.reconcile import Context, Section, SectionInput, engine_at
from analysis.reconcile.concurrency import SWEEP_KINDS

ENGINES = ("vllm", "llamacpp")


def _formats(points: pd.DataFrame) -> dict[str, str]:
    """The weight format each engine served (the points table's first one per engine)."""
    out: dict[str, str] = {}
    if len(points) and "weight_format" in points:
        for e, w in zip(points["engine"], points["weight_format"], strict=True):
            if isinstance(w, str):
                out.setdefault(e, w)
    return out


def _sweep_runs(campaign: Campaign, rnd, engine):
    return [
        r
        for r in campaign.select(round=rnd, engine=engine)
        if any(p.test_kind in SWEEP_KINDS for p in r.points)
    ]


def _by_conc(run) -> dict[int, BenchPoint]:
    return {
        p.concurrency: p
        for p in run.points
        if not p.warmup and p.concurrency is not None and p.test_kind in SWEEP_KINDS
    }


def _pairs(a_run, b_run, label: str, ctx: Context) -> list[dict]:
    a, b = _by_conc(a_run), _by_conc(b_run)
    rows = []
    for c in sorted(set(a) & set(b)):
        pa, pb = a[c], b[c]
        ta, tb = pa.result.output_throughput_tok_s, pb.result.output_throughput_tok_s
        rows.append(
            {
                "comparison": label,
                "a_round": a_run.round or "",
                "b_round": b_run.round or "",
                "engine": a_run.engine,
                "concurrency": c,
                "a": pa.key,
                "b": pb.key,
                "a_output_throughput_tokens_per_s": ta,
                "b_output_throughput_tokens_per_s": tb,
                "delta_pct": fits.error_pct(tb, ta),
                "a_p50_itl_ms": pa.result.itl.p50_ms,
                "b_p50_itl_ms": pb.result.itl.p50_ms,
                "p50_itl_delta_pct": fits.error_pct(pb.result.itl.p50_ms, pa.result.itl.p50_ms),
                "gate_ok": ctx.gate_ok(pa) and ctx.gate_ok(pb),
                "source_a": pa.cite("output_throughput"),
                "source_b": pb.cite("output_throughput"),
            }
        )
    return rows


def _idle_slot_cache_off(log) -> tuple[bool, int | None]:
    """Whether llama.cpp's start-up log says it switched its idle-slot prompt cache off (``--cache-idle-slots
    requires --cache-ram, disabling``), and the line: a setting that changes how slots are reused."""
    hit = next((w for w in log.warnings if "cache-idle-slots" in w.message), None)
    return hit is not None, hit.line if hit else None


# llama.cpp start-up facts compared between rounds: (value, log line)
LLAMACPP_FACTS = {
    "llamacpp_slots": lambda log: (log.n_slots, log.lines.get("n_slots")),
    "llamacpp_ctx_per_slot": lambda log: (log.n_ctx_slot, log.lines.get("n_ctx_slot")),
    "llamacpp_idle_slot_cache_off": _idle_slot_cache_off,
}


def _changes(campaign: Campaign, r1, r2) -> list[dict]:
    """Side-by-side facts of two rounds from their own files (first run of each with the file)."""
    rows = []

    def first(rnd, attr):
        for run in campaign.select(round=rnd):
            rel, rec = getattr(run, attr)
            if rec is not None:
                return run, rel, rec
        return None, None, None

    for what, attr, getter, line_key in (
        ("kv_pool_tokens", "server_log", lambda x: getattr(x, "kv_cache_tokens", None), "kv_cache_tokens"),
        (
            "kv_pool_gib",
            "server_log",
            lambda x: getattr(x, "kv_cache_memory_gib", None),
            "kv_cache_memory_gib",
        ),
        (
            "vllm_non_default_args",
            "server_log",
            lambda x: getattr(x, "non_default_args", None),
            "non_default_args",
        ),
        ("driver_version", "fingerprint", lambda x: x.smi_driver_version, "smi_driver_version"),
        ("cuda_version", "fingerprint", lambda x: x.smi_cuda_version, "smi_driver_version"),
        ("host_mem_total_gib", "fingerprint", lambda x: x.mem_total_gib, "mem_total_gib"),
        ("llamacpp_slots", "server_log", None, None),
        ("llamacpp_ctx_per_slot", "server_log", None, None),
        ("llamacpp_idle_slot_cache_off", "server_log", None, None),
    ):
        vals = []
        for rnd in (r1, r2):
            if what in LLAMACPP_FACTS:
                run = next(iter(campaign.select(round=rnd, engine="llamacpp")), None)
                rel, rec = run.server_log if run else (None, None)
                v, line = LLAMACPP_FACTS[what](rec) if rec else (None, None)
                src = run.cite(rel, line) if rec else ""
            else:
                run, rel, rec = first(rnd, attr) if attr != "server_log" else _first_vllm(campaign, rnd)
                v = getter(rec) if rec is not None else None
                src = run.cite(rel, rec.lines.get(line_key)) if rec is not None else ""
            vals.append((v, src))
        va, vb = vals[0][0], vals[1][0]
        if isinstance(va, dict) and isinstance(vb, dict):
            va, vb = _dict_difference(va, vb)
        rows.append(
            {
                "what": what,
                "a": va,
                "b": vb,
                "changed": vals[0][0] != vals[1][0],
                "source_a": vals[0][1],
                "source_b": vals[1][1],
            }
        )
    return rows


def _dict_difference(a: dict, b: dict) -> tuple[str, str]:
    """Two argument dicts as the entries that differ, ``name=value; …`` each (``—`` where a side has none):
    the table shows what changed, not two copies of everything."""
    names = sorted(k for k in set(a) | set(b) if a.get(k, _ABSENT) != b.get(k, _ABSENT))

    def side(d: dict) -> str:
        return "; ".join(f"{k}={d[k]}" for k in names if k in d) or "—"

    return side(a), side(b)


_ABSENT = object()


def _first_vllm(campaign: Campaign, rnd):
    for run in campaign.select(round=rnd, engine="vllm"):
        rel, rec = run.server_log
        if rec is not None:
            return run, rel, rec
    return None, None, None


def run(s: SectionInput) -> Section:
    campaign, ctx, points = s.campaign, s.ctx, s.points
    findings: list[fnd.Finding] = []
    rows: list[dict] = []
    rounds = [r for r in campaign.rounds if r is not None]
    # repeats inside a round
    for rnd in rounds:
        runs = _sweep_runs(campaign, rnd, "vllm")
        if len(runs) >= 2:
            rep = _pairs(runs[0], runs[1], f"{rnd}:{runs[0].test}->{runs[1].test}", ctx)
            rows += rep
            if rep:
                worst = max(rep, key=lambda r: abs(r["delta_pct"]))
                findings.append(
                    fnd.measured(
                        At(round=rnd, topic="reproducibility", engine="vllm")(
                            "repeat_max_abs_throughput_delta_pct"
                        ),
                        abs(worst["delta_pct"]),
                        "%",
                        [worst["source_a"], worst["source_b"]],
                        concurrency=worst["concurrency"],
                        runs=[runs[0].name, runs[1].name],
                    )
                )
    at = At(topic="reproducibility")
    key = at("max_abs_throughput_delta_pct")
    fmt = _formats(points)
    change_rows: list[dict] = []
    if len(rounds) < 2:
        findings.append(fnd.not_available(key, "%", "single_round", "the campaign has fewer than two rounds"))
    else:
        a, b = rounds[0], rounds[-1]
        between: list[dict] = []
        for engine in ENGINES:
            ra, rb = _sweep_runs(campaign, a, engine), _sweep_runs(campaign, b, engine)
            if ra and rb:
                between += _pairs(ra[0], rb[0], f"{a}->{b}", ctx)
        rows += between
        ok = [r for r in between if r["gate_ok"]]
        if ok:
            worst = max(ok, key=lambda r: abs(r["delta_pct"]))
            findings.append(
                fnd.measured(
                    key,
                    abs(worst["delta_pct"]),
                    "%",
                    [worst["source_a"], worst["source_b"]],
                    worst_engine=worst["engine"],
                    concurrency=worst["concurrency"],
                    signed_delta_pct=worst["delta_pct"],
                    rounds=[a, b],
                    excluded_gated_out=[
                        f"{r['engine']}@{r['concurrency']}" for r in between if not r["gate_ok"]
                    ],
                )
            )
            for engine in ENGINES:
                eo = [r for r in ok if r["engine"] == engine]
                if eo:
                    w = max(eo, key=lambda r: abs(r["delta_pct"]))
                    findings.append(
                        fnd.measured(
                            engine_at(None, engine, fmt.get(engine), topic="reproducibility")(
                                "max_abs_throughput_delta_pct"
                            ),
                            abs(w["delta_pct"]),
                            "%",
                            [w["source_a"], w["source_b"]],
                            concurrency=w["concurrency"],
                            signed_delta_pct=w["delta_pct"],
                        )
                    )
        else:
            findings.append(fnd.not_available(key, "%", "engine_missing", "no common gated-in sweep point"))
        change_rows = _changes(campaign, a, b)
        changed = [r["what"] for r in change_rows if r["changed"]]
        findings.append(
            fnd.measured(
                at("changed_between_rounds"),
                changed,
                "list",
                [s for r in change_rows if r["changed"] for s in (r["source_a"], r["source_b"]) if s],
            )
        )
    return Section(
        name="reproducibility",
        tables={"reproducibility": pd.DataFrame(rows), "reproducibility_changes": pd.DataFrame(change_rows)},
        findings=findings,
    )
