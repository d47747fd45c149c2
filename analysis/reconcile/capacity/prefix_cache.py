"""Prefix-cache hit rate per point of our own runs: how much of the prompts the engine took from its cache
instead of computing (a shared-prefix or multi-turn workload, with the plan's ``prefix_cache = "on"``).

Sources, per engine, from the collector's own /metrics scrapes at the point's start and end
(``scrapes.jsonl``, tags ``point_start`` / ``point_end``):

- vLLM (v1 metrics, ``vllm/v1/metrics/loggers.py``): ``vllm:prefix_cache_hits_total`` (cached tokens) over
  ``vllm:prefix_cache_queries_total`` (queried tokens);
- llama.cpp: ``llamacpp:prompt_tokens_cached_total`` (prompt tokens taken from a slot's cache) over those
  plus ``llamacpp:prompt_tokens_total`` (prompt tokens evaluated); without scrapes, the same from each
  request's ``timings`` (``cache_n`` over ``cache_n + prompt_n``, in ``requests.jsonl``).

An engine or run that exposes neither gives an n/a finding with its reason, never a zero; a campaign with no
point of its own (an imported campaign, or own runs with warm-up points only) gives one campaign-wide n/a
finding, so the overview page can say why it has no hit rate.
"""

from __future__ import annotations

from typing import Any

from analysis.core.findings import Finding
from analysis.core.keys import At
from analysis.loading.campaign import RunData
from analysis.parse.scrapes_jsonl import counter_total, parsed_samples
from analysis.reconcile import Section, SectionInput, run_at
from collector.raw.metric_families import (
    LLAMACPP_COUNTERS,
    LLAMACPP_PROMPT_CACHED,
    VLLM_COUNTERS,
    VLLM_PREFIX_QUERIES,
)
from collector.raw.records import ScrapeRecord

TOPIC = "prefix_cache"
VLLM_HITS, VLLM_QUERIES = VLLM_COUNTERS["prefix_hits"], VLLM_PREFIX_QUERIES
LLAMACPP_CACHED, LLAMACPP_EVALUATED = LLAMACPP_PROMPT_CACHED, LLAMACPP_COUNTERS["prompt_tokens"]


def hit_rate(hit_tokens: float, queried_tokens: float) -> float | None:
    """Prefix-cache hit rate, ratio 0..1: prompt tokens taken from the cache ÷ prompt tokens looked up; None
    when no token was looked up."""
    return hit_tokens / queried_tokens if queried_tokens > 0 else None


def counters(engine: str, samples: dict[tuple[str, tuple[Any, ...]], float]) -> tuple[float, float] | None:
    """(hit tokens, queried tokens) as one /metrics scrape counts them so far; None when the engine does
    not expose them."""
    if engine == "vllm":
        hits, queries = counter_total(samples, VLLM_HITS), counter_total(samples, VLLM_QUERIES)
        return None if hits is None or queries is None else (hits, queries)
    cached, evaluated = counter_total(samples, LLAMACPP_CACHED), counter_total(samples, LLAMACPP_EVALUATED)
    return None if cached is None or evaluated is None else (cached, cached + evaluated)


def timings_counts(fields: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(hit tokens, queried tokens) summed over llama.cpp requests' ``timings`` (``cache_n``, ``prompt_n``);
    None when any completed request lacks them. ``fields``: the requests' lines as decoded
    (``RequestColumns.fields``; completed: no ``error``)."""
    ok = [f for f in fields if f.get("error") is None]
    t = [f.get("engine_timings") or {} for f in ok]
    if not ok or any(
        not isinstance(x.get("cache_n"), int) or not isinstance(x.get("prompt_n"), int) for x in t
    ):
        return None
    hits = sum(x["cache_n"] for x in t)
    return float(hits), float(hits + sum(x["prompt_n"] for x in t))


def _boundary(scrapes: list[ScrapeRecord], point: str, tag: str) -> ScrapeRecord | None:
    found = [s for s in scrapes if s.tag == tag and s.point == point and s.ok]
    return found[-1] if found else None


def point_findings(run: RunData) -> list[Finding]:
    """One ``prefix_cache_hit_rate`` finding per non-warmup point of an own run."""
    rrel, reqs = run.requests
    srel, scr = run.scrapes
    if rrel is None or reqs is None:
        return []
    by_point: dict[str, list[dict[str, Any]]] = {}
    for f in reqs.columns.fields:
        if f["phase_kind"] != "warmup":
            by_point.setdefault(f["point"], []).append(f)
    out = []
    for point in sorted(by_point):
        at = run_at(run, None, TOPIC)("prefix_cache_hit_rate", test=point)
        counts, sources = None, []
        if srel is not None and scr is not None:
            a, b = _boundary(scr.records, point, "point_start"), _boundary(scr.records, point, "point_end")
            if a is not None and b is not None:
                sa, sb = parsed_samples(a), parsed_samples(b)
                ca = counters(run.engine, sa) if sa is not None else None
                cb = counters(run.engine, sb) if sb is not None else None
                if ca is not None and cb is not None:
                    counts = (cb[0] - ca[0], cb[1] - ca[1])
                    sources = [run.cite(srel, a.line), run.cite(srel, b.line)]
        if counts is None and run.engine == "llamacpp":
            counts = timings_counts(by_point[point])
            sources = [run.cite(rrel, "engine_timings")] if counts is not None else []
        out.append(_finding(at, counts, sources, run.engine, point))
    return out


def _finding(
    at: At, counts: tuple[float, float] | None, sources: list[str], engine: str, point: str
) -> Finding:
    if counts is None:
        why = f"{engine}: no prefix-cache counters in the point's /metrics scrapes" + (
            " nor cache_n/prompt_n in the requests' timings" if engine == "llamacpp" else ""
        )
        return Finding(
            at,
            None,
            "fraction",
            status="n/a",
            reason="prefix_cache_not_exposed",
            detail=why,
            extra={"point": point},
        )
    rate = hit_rate(*counts)
    if rate is None:
        return Finding(
            at,
            None,
            "fraction",
            tuple(sources),
            status="n/a",
            reason="prefix_cache_no_lookups",
            detail="no prompt token was looked up during the point",
            extra={"point": point},
        )
    return Finding(
        at,
        rate,
        "fraction",
        tuple(sources),
        extra={"point": point, "hit_tokens": counts[0], "queried_tokens": counts[1]},
    )


def run(s: SectionInput) -> Section:
    """Every own run's per-point hit rates (imported campaigns have no point-boundary scrapes)."""
    campaign = s.campaign
    found: list[Finding] = []
    own = [r for r in campaign.all_runs if r.own]
    for r in own:
        found += point_findings(r)
    if not found:
        reason, why = (
            ("prefix_cache_no_points", "the campaign's own runs have no measured (non-warm-up) point")
            if own
            else ("prefix_cache_imported", "imported results have no /metrics scrapes at point boundaries")
        )
        at = At(topic=TOPIC)("prefix_cache_hit_rate")
        found.append(Finding(at, None, "fraction", status="n/a", reason=reason, detail=why))
    return Section("prefix_cache", findings=found)
