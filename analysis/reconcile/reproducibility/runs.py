"""Reproducibility: per-point throughput deltas between rounds (and between repeat sweeps of one round),
and what changed between the rounds (pool size, driver, CUDA, client arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint, Campaign, RunData
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


def _sweep_runs(campaign: Campaign, rnd: str | None, engine: str) -> list[RunData]:
    return [
        r
        for r in campaign.select(round=rnd, engine=engine)
        if any(p.test_kind in SWEEP_KINDS for p in r.points)
    ]


def _by_conc(run: RunData) -> dict[int, BenchPoint]:
    return {
        p.concurrency: p
        for p in run.points
        if not p.warmup and p.concurrency is not None and p.test_kind in SWEEP_KINDS
    }


def _delta_pct(b: float | None, a: float | None) -> float | None:
    """b against a, % (fits.error_pct); None without both."""
    return None if a is None or b is None else fits.error_pct(b, a)


Pair = dict[str, Any]  # a row of the reproducibility table (_pairs)


def _pairs(a_run: RunData, b_run: RunData, label: str, ctx: Context) -> list[Pair]:
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
                "delta_pct": _delta_pct(tb, ta),
                "a_p50_itl_ms": pa.result.itl.p50_ms,
                "b_p50_itl_ms": pb.result.itl.p50_ms,
                "p50_itl_delta_pct": _delta_pct(pb.result.itl.p50_ms, pa.result.itl.p50_ms),
                "gate_ok": ctx.gate_ok(pa) and ctx.gate_ok(pb),
                "source_a": pa.cite("output_throughput"),
                "source_b": pb.cite("output_throughput"),
            }
        )
    return rows


def _idle_slot_cache_off(log: Any) -> tuple[bool, int | None]:
    """Whether llama.cpp's start-up log says it switched its idle-slot prompt cache off (``--cache-idle-slots
    requires --cache-ram, disabling``), and the line: a setting that changes how slots are reused."""
    hit = next((w for w in log.warnings if "cache-idle-slots" in w.message), None)
    return hit is not None, hit.line if hit else None


# facts compared between rounds from each round's first run with the file: (what, RunData's file attribute,
# the value from the parsed file, the line it is on)
FILE_FACTS: tuple[tuple[str, str, Callable[[Any], Any], str], ...] = (
    ("kv_pool_tokens", "server_log", lambda x: getattr(x, "kv_cache_tokens", None), "kv_cache_tokens"),
    ("kv_pool_gib", "server_log", lambda x: getattr(x, "kv_cache_memory_gib", None), "kv_cache_memory_gib"),
    (
        "vllm_non_default_args",
        "server_log",
        lambda x: getattr(x, "non_default_args", None),
        "non_default_args",
    ),
    ("driver_version", "fingerprint", lambda x: x.smi_driver_version, "smi_driver_version"),
    ("cuda_version", "fingerprint", lambda x: x.smi_cuda_version, "smi_driver_version"),
    ("host_mem_total_gib", "fingerprint", lambda x: x.mem_total_gib, "mem_total_gib"),
)
# llama.cpp start-up facts compared between rounds: (value, log line)
LLAMACPP_FACTS: dict[str, Callable[[Any], tuple[Any, int | None]]] = {
    "llamacpp_slots": lambda log: (log.n_slots, log.lines.get("n_slots")),
    "llamacpp_ctx_per_slot": lambda log: (log.n_ctx_slot, log.lines.get("n_ctx_slot")),
    "llamacpp_idle_slot_cache_off": _idle_slot_cache_off,
}


def _first_with(campaign: Campaign, rnd: str | None, attr: str) -> tuple[RunData, str, Any] | None:
    """The round's first run with the file (vLLM's server log for ``server_log``), its name and record."""
    runs = campaign.select(round=rnd, engine="vllm") if attr == "server_log" else campaign.select(round=rnd)
    for run in runs:
        rel, rec = getattr(run, attr)
        if rel is not None and rec is not None:
            return run, rel, rec
    return None


def _file_fact(
    campaign: Campaign, rnd: str | None, attr: str, getter: Callable[[Any], Any], line_key: str
) -> tuple[Any, str]:
    """A fact of one round from its first run's file: (value, citation); (None, "") without the file."""
    found = _first_with(campaign, rnd, attr)
    if found is None:
        return None, ""
    run, rel, rec = found
    return getter(rec), run.cite(rel, rec.lines.get(line_key))


def _llamacpp_fact(campaign: Campaign, rnd: str | None, what: str) -> tuple[Any, str]:
    """A llama.cpp start-up fact of one round (its first llama.cpp run's log): (value, citation)."""
    run = next(iter(campaign.select(round=rnd, engine="llamacpp")), None)
    rel, rec = run.server_log if run else (None, None)
    if run is None or rel is None or not rec:
        return None, ""
    v, line = LLAMACPP_FACTS[what](rec)
    return v, run.cite(rel, line)


def _change_row(what: str, vals: list[tuple[Any, str]]) -> dict[str, Any]:
    va, vb = vals[0][0], vals[1][0]
    if isinstance(va, dict) and isinstance(vb, dict):
        va, vb = _dict_difference(va, vb)
    return {
        "what": what,
        "a": va,
        "b": vb,
        "changed": vals[0][0] != vals[1][0],
        "source_a": vals[0][1],
        "source_b": vals[1][1],
    }


def _changes(campaign: Campaign, r1: str | None, r2: str | None) -> list[dict[str, Any]]:
    """Side-by-side facts of two rounds from their own files (first run of each with the file)."""
    rows = [
        _change_row(what, [_file_fact(campaign, rnd, attr, getter, line_key) for rnd in (r1, r2)])
        for what, attr, getter, line_key in FILE_FACTS
    ]
    rows += [
        _change_row(what, [_llamacpp_fact(campaign, rnd, what) for rnd in (r1, r2)])
        for what in LLAMACPP_FACTS
    ]
    return rows


def _dict_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, str]:
    """Two argument dicts as the entries that differ, ``name=value; …`` each (``—`` where a side has none):
    the table shows what changed, not two copies of everything."""
    names = sorted(k for k in set(a) | set(b) if a.get(k, _ABSENT) != b.get(k, _ABSENT))

    def side(d: dict[str, Any]) -> str:
        return "; ".join(f"{k}={d[k]}" for k in names if k in d) or "—"

    return side(a), side(b)


_ABSENT = object()


def _abs_delta(r: Pair) -> float:
    delta: float = abs(r["delta_pct"])
    return delta


def _repeats(rnd: str, campaign: Campaign, ctx: Context) -> tuple[list[Pair], list[fnd.Finding]]:
    """A round's repeat sweep (vLLM) against its first: the pairs, and the largest throughput delta."""
    runs = _sweep_runs(campaign, rnd, "vllm")
    if len(runs) < 2:
        return [], []
    rep = _pairs(runs[0], runs[1], f"{rnd}:{runs[0].test}->{runs[1].test}", ctx)
    if not rep:
        return rep, []
    worst = max(rep, key=_abs_delta)
    return rep, [
        fnd.measured(
            At(round=rnd, topic="reproducibility", engine="vllm")("repeat_max_abs_throughput_delta_pct"),
            _abs_delta(worst),
            "%",
            [worst["source_a"], worst["source_b"]],
            concurrency=worst["concurrency"],
            runs=[runs[0].name, runs[1].name],
        )
    ]


def _between_findings(between: list[Pair], a: str, b: str, fmt: dict[str, str]) -> list[fnd.Finding]:
    """The largest gated-in throughput delta between the first and the last round, overall and per engine."""
    key = At(topic="reproducibility")("max_abs_throughput_delta_pct")
    ok = [r for r in between if r["gate_ok"]]
    if not ok:
        return [fnd.not_available(key, "%", "engine_missing", "no common gated-in sweep point")]
    worst = max(ok, key=_abs_delta)
    out = [
        fnd.measured(
            key,
            _abs_delta(worst),
            "%",
            [worst["source_a"], worst["source_b"]],
            worst_engine=worst["engine"],
            concurrency=worst["concurrency"],
            signed_delta_pct=worst["delta_pct"],
            rounds=[a, b],
            excluded_gated_out=[f"{r['engine']}@{r['concurrency']}" for r in between if not r["gate_ok"]],
        )
    ]
    for engine in ENGINES:
        eo = [r for r in ok if r["engine"] == engine]
        if eo:
            w = max(eo, key=_abs_delta)
            out.append(
                fnd.measured(
                    engine_at(None, engine, fmt.get(engine), topic="reproducibility")(
                        "max_abs_throughput_delta_pct"
                    ),
                    _abs_delta(w),
                    "%",
                    [w["source_a"], w["source_b"]],
                    concurrency=w["concurrency"],
                    signed_delta_pct=w["delta_pct"],
                )
            )
    return out


def run(s: SectionInput) -> Section:
    campaign, ctx = s.campaign, s.ctx
    findings: list[fnd.Finding] = []
    rows: list[Pair] = []
    rounds = [r for r in campaign.rounds if r is not None]
    for rnd in rounds:  # repeats inside a round
        rep, found = _repeats(rnd, campaign, ctx)
        rows += rep
        findings += found
    at = At(topic="reproducibility")
    change_rows: list[dict[str, Any]] = []
    if len(rounds) < 2:
        findings.append(
            fnd.not_available(
                at("max_abs_throughput_delta_pct"),
                "%",
                "single_round",
                "the campaign has fewer than two rounds",
            )
        )
    else:
        a, b = rounds[0], rounds[-1]
        between: list[Pair] = []
        for engine in ENGINES:
            ra, rb = _sweep_runs(campaign, a, engine), _sweep_runs(campaign, b, engine)
            if ra and rb:
                between += _pairs(ra[0], rb[0], f"{a}->{b}", ctx)
        rows += between
        findings += _between_findings(between, a, b, _formats(s.points))
        change_rows = _changes(campaign, a, b)
        findings.append(
            fnd.measured(
                at("changed_between_rounds"),
                [r["what"] for r in change_rows if r["changed"]],
                "list",
                [s for r in change_rows if r["changed"] for s in (r["source_a"], r["source_b"]) if s],
            )
        )
    return Section(
        name="reproducibility",
        tables={"reproducibility": pd.DataFrame(rows), "reproducibility_changes": pd.DataFrame(change_rows)},
        findings=findings,
    )
