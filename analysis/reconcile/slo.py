"""Goodput and the SLO planner (issue #14, items 2 and 3).

Goodput (per point, SLOs given at analysis time): the requests of a point meeting every SLO, per request
(``analysis.metrics.meets_slos``: vllm bench serve's ``--goodput`` semantics), ÷ the point's duration. Exact
only where the run kept one record per request (``requests.jsonl``, our own runs); a file of percentiles (the
reference campaign's bench JSON) cannot say which requests met all SLOs at once: n/a with that reason.

The planner, per round and engine: the highest concurrency whose p99 TTFT (and p99 ITL, when given) stays
within the budget. Method: the sweep's gated points in concurrency order; the highest point within the budget
and the next one up bracket the answer (lower points over the budget are named: p99 not monotone); between
them p99 is taken as linear in log2(concurrency) (``interpolate_log2``); with two budgets the lower
concurrency binds. Our campaigns and the reference are closed-loop only (fixed concurrency, no request-rate
arrivals): the answer is a concurrency, with the request throughput interpolated the same way. Where the
measured points do not bracket the budget it names the point to measure next and writes the ``[[phase]]``
stanza for it. The settings that follow come from the server log's KV pool line and the capacity theory
(``analysis.theory``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import findings as fnd
from analysis import metrics, theory
from analysis.campaign import PHASE_TEST_KIND, BenchPoint, Campaign, RunData
from analysis.keys import At
from analysis.reconcile import Context, Section, SectionInput, engine_at, run_at
from analysis.reconcile.concurrency import run_sweep_points, sweep_points
from collector.raw.errors import AnatomyError

ENGINES = ("vllm", "llamacpp")
RATE_TEST_KIND = PHASE_TEST_KIND["rate"]  # an open-loop point's test kind
# the reference campaign's budget: p99 TTFT 730 ms, where its two engines' p99 TTFT curves cross (the
# engine-selection boundary), borrowed as a demonstration budget — not a production target
REFERENCE_TTFT_P99_MS = 730.0
# our own campaigns, when no budget lies between every sweep's lowest and highest p99 TTFT: twice the
# slowest sweep's lowest (default_budget_ms; the page says which it is)
OWN_BUDGET_FACTOR = 2.0
# vLLM's block size on CUDA when neither the plan nor the command line names one
VLLM_DEFAULT_BLOCK = 16
METHOD = (
    "p99 per measured point; the highest concurrency within the budget and the next one up bracket the "
    "answer; "
    "p99 linear in log2(concurrency) between them; with two budgets the lower concurrency binds"
)


class SloError(AnatomyError, ValueError):
    """A malformed ``--slo`` (one line saying which and why)."""


def parse_slos(items: list[str] | None) -> dict[str, float]:
    """``["ttft_ms=730", "tpot_ms=50"]`` → ``{"ttft_ms": 730.0, "tpot_ms": 50.0}`` (metrics.SLO_METRICS)."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, val = item.partition("=")
        name = name.strip()
        if not sep or name not in metrics.SLO_METRICS:
            raise SloError(f"--slo {item!r}: want NAME=MS with NAME one of {', '.join(metrics.SLO_METRICS)}")
        try:
            ms = float(val)
        except ValueError:
            raise SloError(f"--slo {item!r}: {val!r} is not a number of milliseconds") from None
        if not math.isfinite(ms) or ms <= 0:
            raise SloError(f"--slo {item!r}: the threshold must be a positive number of ms")
        out[name] = ms
    return out


def interpolate_log2(x_lo: float, y_lo: float, x_hi: float, y_hi: float, y: float) -> float:
    """The x where y is reached, y linear in log2(x) between (x_lo, y_lo) and (x_hi, y_hi):
    x = 2^(log2 x_lo + (y − y_lo) ÷ (y_hi − y_lo) × (log2 x_hi − log2 x_lo))."""
    frac = (y - y_lo) / (y_hi - y_lo)
    return 2 ** (math.log2(x_lo) + frac * (math.log2(x_hi) - math.log2(x_lo)))


def value_at_log2(x_lo: float, v_lo: float, x_hi: float, v_hi: float, x: float) -> float:
    """v at x, v linear in log2(x) between (x_lo, v_lo) and (x_hi, v_hi)."""
    frac = (math.log2(x) - math.log2(x_lo)) / (math.log2(x_hi) - math.log2(x_lo))
    return v_lo + frac * (v_hi - v_lo)


def slos_for(
    run: RunData, given: Mapping[str, float] | None, fallback: Mapping[str, float] | None = None
) -> tuple[dict[str, float], str]:
    """The per-request SLOs goodput is judged by for one run, and their basis: the analysis-time ``--slo``
    values (``given``) win; else the ``[slo]`` table of the plan the run kept (``plan``: its copy in raw/);
    else ``fallback`` (the SLO page's budget as a TTFT SLO: ``slo_page_budget``); ({}, "none") without any."""
    if given:
        return dict(given), "given"
    plan = run.docs.plan if run.docs is not None else None
    if plan is not None and getattr(plan, "slo", None):
        return dict(plan.slo), "plan"
    return (dict(fallback), "slo_page_budget") if fallback else ({}, "none")


def point_goodput(p: BenchPoint, slos_ms: Mapping[str, float]) -> tuple[int, float | None] | None:
    """(good requests, goodput req/s) of one point from its request records; None without them."""
    recs = p.records
    if not recs:
        return None
    good = metrics.good_requests(recs, dict(slos_ms))
    return good, metrics.goodput_req_s(good, metrics.duration_s(recs))


@dataclass(frozen=True)
class Measured:
    concurrency: int
    p99_ttft_ms: float | None
    p99_itl_ms: float | None
    request_throughput_req_s: float | None
    output_throughput_tok_s: float | None
    source: str  # the point's file (its p99_ttft_ms field)
    run: str
    label: str  # the point's name in its run (file stem, or point id in requests.jsonl)
    max_running: float | None  # the running gauge's highest sample in the point's window


@dataclass
class SloAnswer:
    """The planner's answer for one round and engine (see the module docstring for the method)."""

    campaign: str
    round: str | None
    engine: str
    weight_format: str | None
    run: str | None
    ttft_p99_ms: float
    itl_p99_ms: float | None
    points: list[Measured] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # gated-out points' files
    status: str = "no_points"  # bracketed | highest_meets | none_meet | no_points
    # lower concurrencies over the budget below the answer (p99 not monotone in concurrency: few requests)
    non_monotone: list[int] = field(default_factory=list)
    binding: str | None = None  # "ttft" or "itl"
    concurrency: float | None = None
    lower: Measured | None = None
    upper: Measured | None = None
    request_throughput_req_s: float | None = None
    output_throughput_tok_s: float | None = None  # interpolated like the request throughput
    goodput_req_s: float | None = None  # exact, at the lower bracketing point
    goodput_good: int | None = None
    goodput_reason: str | None = None
    settings: dict = field(default_factory=dict)
    next_concurrency: int | None = None
    stanza: str | None = None
    load: str = "closed-loop only"
    method: str = METHOD
    # "engine": the round's engine (its first sweep run); "run": a further sweep of our own with another
    # weight format (its findings are addressed by the run)
    level: str = "engine"


def _meets(p: Measured, attr: str, budget: float) -> bool:
    v = getattr(p, attr)
    return v is not None and v <= budget


def _crossing(pts: list[Measured], attr: str, budget: float) -> tuple[str, int | None]:
    """('bracketed', i): pts[i - 1] is the highest concurrency within the budget and pts[i], the next one, is
    over it; 'highest_meets' (the highest measured concurrency is within) or 'none_meet'."""
    meets = [i for i, p in enumerate(pts) if _meets(p, attr, budget)]
    if not meets:
        return "none_meet", None
    if meets[-1] == len(pts) - 1:
        return "highest_meets", None
    return "bracketed", meets[-1] + 1


def _next_point(pts: list[Measured], status: str) -> int | None:
    """The highest meets: double it (the sweeps' own step); none meet: halve the lowest (none below 1: the
    budget is out of reach of this configuration)."""
    if status == "highest_meets":
        return pts[-1].concurrency * 2
    low = pts[0].concurrency
    return low // 2 if low > 1 else None


def plan_stanza(concurrency: int, ref: BenchPoint) -> str:
    """A ``[[phase]]`` stanza (collector.raw.plan's phase schema) measuring one more sweep point at
    ``concurrency``, with the measured sweep's lengths and its requests-per-stream ratio."""
    per_stream = (ref.result.num_prompts or ref.result.completed) / (ref.concurrency or 1)
    requests = max(concurrency, math.ceil(per_stream * concurrency))
    return (
        "[[phase]]\n"
        f'name = "slo-next-c{concurrency:03d}"\n'
        'kind = "concurrency"\n'
        f"input_len = {round(ref.input_len_tokens or 0)}\n"
        f"output_len = {ref.requested_output_len_tokens}\n"
        "points = [\n"
        f"  {{ concurrency = {concurrency}, requests = {requests}, seed = {100 + concurrency} }},\n"
        "]\n"
    )


def admission_limit(concurrency: float) -> int:
    """The requests to keep in flight for the budget, requests: floor(the interpolated concurrency). A
    proxy or gateway in front of the server enforces it (at most this many in flight, 429 beyond); a
    server-side cap (--max-num-seqs, -np) does not, since the requests over it wait inside the server, on
    the clock of their TTFT."""
    return math.floor(concurrency)


def kv_max_num_seqs(max_concurrency_log: float) -> int:
    """vLLM's --max-num-seqs at the KV capacity, requests: floor(the log's maximum concurrency), the
    full-length requests (max_model_len tokens each) the pool holds at once — no request is ever preempted
    for want of blocks below it, whatever its length."""
    return math.floor(max_concurrency_log)


def _settings(ans: SloAnswer, pt: BenchPoint) -> dict:
    """What the interpolated concurrency means for the deployment, from the sweep run's server log and the
    capacity theory. Both engines: admit at most admission_limit(concurrency) requests in flight in front
    of the server. vLLM: --max-num-seqs at the KV capacity (kv_max_num_seqs), against the residents the KV
    pool holds for these requests (blocks ÷ ceil(request tokens ÷ block)) and the log's max_model_len line
    (blocks ÷ ceil(max_model_len ÷ block)); halving --max-model-len doubles that line but leaves the pool
    (sized by memory) and so these requests' residents unchanged, as long as a request still fits.
    llama.cpp: at least that many slots (-np), each needing the request's tokens of context (-c ≥ slots ×
    request tokens)."""
    c = ans.concurrency
    run = pt.run
    req_tokens = (
        round(pt.input_len_tokens + pt.requested_output_len_tokens)
        if pt.input_len_tokens is not None and pt.requested_output_len_tokens is not None
        else None
    )
    out: dict = {"request_tokens": req_tokens}
    if c is None:
        return out
    limit = admission_limit(c)
    out["admission_limit"] = limit
    rel, log = run.server_log
    if ans.engine == "llamacpp":
        out.update(np_slots=limit, ctx_tokens_min=limit * req_tokens if req_tokens else None)
        return out
    if log is None or log.kv_cache_tokens is None or not log.max_model_len:
        out["kv_reason"] = "no KV pool line in the server log"
        return out
    plan = run.docs.plan
    block = plan.model.block_size if plan is not None and plan.model.block_size else VLLM_DEFAULT_BLOCK
    mml = log.max_model_len
    # logged tokens = floor(blocks ÷ ceil(mml ÷ block) × mml) = blocks × block when block divides mml
    blocks = log.kv_cache_tokens // block if mml % block == 0 else None
    out.update(
        kv_pool_tokens=log.kv_cache_tokens,
        block_size=block,
        max_model_len=mml,
        max_concurrency_log=log.max_concurrency_x,
        source=run.cite(rel, log.lines.get("kv_cache_tokens")) if rel else None,
    )
    if log.max_concurrency_x:
        out["max_num_seqs"] = kv_max_num_seqs(log.max_concurrency_x)
    if blocks is None or not req_tokens:
        return out
    residents = blocks // math.ceil(req_tokens / block)
    half = mml // 2
    out.update(
        kv_blocks=blocks,
        residents_pool=residents,
        admission_fits_pool=limit <= residents,
        half_max_model_len=half,
        half_max_concurrency_line=theory.vllm_max_concurrency(blocks, block, half),
        half_residents_pool=residents if req_tokens <= half else 0,
        half_refuses_requests=req_tokens > half,
    )
    return out


def plan(
    campaign: Campaign,
    ttft_p99_ms: float,
    itl_p99_ms: float | None = None,
    engine: str | None = None,
    gate_ok: Callable[[BenchPoint], bool] | None = None,
    window_max_running: Callable[[BenchPoint], float | None] | None = None,
    weight_format_of: Callable | None = None,
) -> list[SloAnswer]:
    """The planner's answer per round and engine of a campaign (see the module docstring), and for each
    further sweep run of our own with a weight format the engine's first run does not have (level
    ``run``): every series the campaign measured is planned."""
    readers = PointReaders(gate_ok, window_max_running, weight_format_of)
    answers = []
    for rnd in campaign.rounds:
        for eng in ENGINES if engine is None else (engine,):
            first = sweep_points(campaign, rnd, eng)
            ans = plan_sweep(campaign.name, rnd, eng, first, ttft_p99_ms, itl_p99_ms, readers)
            if ans is None:
                continue
            answers.append(ans)
            formats = {ans.weight_format}
            for run in campaign.select(round=rnd, engine=eng):
                pts = run_sweep_points(run) if run.own and run.name != ans.run else []
                more = plan_sweep(campaign.name, rnd, eng, pts, ttft_p99_ms, itl_p99_ms, readers)
                if more is not None and more.weight_format not in formats:
                    formats.add(more.weight_format)
                    more.level = "run"
                    answers.append(more)
    return answers


@dataclass(frozen=True)
class PointReaders:
    """What the planner asks of each point beyond its result: whether its gates let it carry conclusions
    (None: every point does), the running gauge's highest sample in its window, the weight format its run
    served (None: not known)."""

    gate_ok: Callable[[BenchPoint], bool] | None = None
    max_running: Callable[[BenchPoint], float | None] | None = None
    weight_format_of: Callable | None = None


def _sweep_concurrency(p: BenchPoint) -> int:
    """A sweep point's concurrency (every sweep point has one: concurrency.run_sweep_points)."""
    assert p.concurrency is not None
    return p.concurrency


def _measured(p: BenchPoint, readers: PointReaders) -> Measured:
    return Measured(
        concurrency=_sweep_concurrency(p),
        p99_ttft_ms=p.result.p99_ttft_ms,
        p99_itl_ms=p.result.itl.p99_ms,
        request_throughput_req_s=p.result.request_throughput_req_s,
        output_throughput_tok_s=p.result.output_throughput_tok_s,
        source=p.cite("p99_ttft_ms"),
        run=p.run.name,
        label=p.label,
        max_running=readers.max_running(p) if readers.max_running else None,
    )


def plan_sweep(
    campaign: str,
    rnd: str | None,
    eng: str,
    sweep: list[BenchPoint],
    ttft_p99_ms: float,
    itl_p99_ms: float | None = None,
    readers: PointReaders = PointReaders(),
) -> SloAnswer | None:
    """The planner's answer for one concurrency sweep (one series: a round's engine, or one run of our own);
    None for a sweep without points. The selection page's best-per-budget table asks this for every series
    and budget."""
    allpts = sorted(sweep, key=_sweep_concurrency)
    if not allpts:
        return None
    ok = [p for p in allpts if readers.gate_ok is None or readers.gate_ok(p)]
    ans = SloAnswer(
        campaign=campaign,
        round=rnd,
        engine=eng,
        weight_format=_weight_format(allpts[0], readers.weight_format_of),
        run=allpts[0].run.name,
        ttft_p99_ms=ttft_p99_ms,
        itl_p99_ms=itl_p99_ms,
        excluded=[p.cite() for p in allpts if p not in ok],
    )
    ans.points = [_measured(p, readers) for p in ok]
    if not ans.points:
        return ans
    by_m = {id(m): p for m, p in zip(ans.points, ok, strict=True)}
    budgets = [("ttft", "p99_ttft_ms", ttft_p99_ms)]
    if itl_p99_ms is not None:
        budgets.append(("itl", "p99_itl_ms", itl_p99_ms))
    best = _binding_crossing(ans, budgets)
    ref = by_m[id(ans.points[-1 if ans.status == "highest_meets" else 0])]
    top = best[2] - 1 if ans.status == "bracketed" and best else len(ans.points) - 1  # the answer's point
    if ans.status != "none_meet":
        ans.non_monotone = [
            m.concurrency for m in ans.points[:top] if not all(_meets(m, attr, b) for _, attr, b in budgets)
        ]
    if ans.status == "bracketed" and best is not None:
        ref = _answer_bracketed(ans, best, by_m)
    else:
        ans.next_concurrency = _next_point(ans.points, ans.status)
        if ans.next_concurrency is not None:
            ans.stanza = plan_stanza(ans.next_concurrency, ref)
    ans.settings = _settings(ans, ref)
    return ans


def _binding_crossing(ans: SloAnswer, budgets: list[tuple[str, str, float]]) -> tuple[float, str, int] | None:
    """Set the answer's status from every budget's crossing: none_meet when some budget is missed at every
    point, bracketed when some budget is crossed between two points, else highest_meets; return the
    binding crossing (the lowest interpolated concurrency, the budget's name, the upper point's index)."""
    best: tuple[float, str, int] | None = None
    statuses = []
    for name, attr, b in budgets:
        status, i = _crossing(ans.points, attr, b)
        statuses.append(status)
        if status == "bracketed" and i is not None:
            lo, hi = ans.points[i - 1], ans.points[i]
            c = interpolate_log2(lo.concurrency, getattr(lo, attr), hi.concurrency, getattr(hi, attr), b)
            if best is None or c < best[0]:
                best = (c, name, i)
    if "none_meet" in statuses:
        ans.status = "none_meet"
    elif best is not None:
        ans.status = "bracketed"
    else:
        ans.status = "highest_meets"
    return best


def _answer_bracketed(
    ans: SloAnswer, best: tuple[float, str, int], by_m: dict[int, BenchPoint]
) -> BenchPoint:
    """Fill a bracketed answer: the interpolated concurrency and throughputs, the exact goodput at the lower
    bracketing point; return that point (the settings' reference)."""
    c, ans.binding, i = best
    ans.concurrency, ans.lower, ans.upper = c, ans.points[i - 1], ans.points[i]
    lo, hi = ans.lower, ans.upper
    # the throughputs at the answer: linear in log2(concurrency) between the bracketing points, as p99 is
    for attr in ("request_throughput_req_s", "output_throughput_tok_s"):
        v_lo, v_hi = getattr(lo, attr), getattr(hi, attr)
        if v_lo is not None and v_hi is not None:
            setattr(ans, attr, value_at_log2(lo.concurrency, v_lo, hi.concurrency, v_hi, c))
    ref = by_m[id(lo)]
    slos = {"ttft_ms": ans.ttft_p99_ms} | ({"itl_ms": ans.itl_p99_ms} if ans.itl_p99_ms is not None else {})
    g = point_goodput(ref, slos)
    if g is None:
        ans.goodput_reason = (
            "no per-request records (no requests.jsonl): the bench files hold percentiles, and "
            "which requests met every SLO at once is not in them"
        )
    else:
        ans.goodput_good, ans.goodput_req_s = g
    return ref


# --- request rate (open-loop sweeps: a kind = "rate" phase) -------------------------------------------------

RATE_METHOD = (
    "p99 per measured rate point (open loop, by offered request rate); the highest rate within the budget "
    "and the next one up bracket the answer; p99 linear in log2(request rate) between them; with two "
    "budgets the lower rate binds"
)


@dataclass(frozen=True)
class RateMeasured:
    request_rate_req_s: float  # the plan's offered rate
    p99_ttft_ms: float | None
    p99_itl_ms: float | None
    achieved_rate_req_s: float | None  # completions per second (metrics.achieved_rate_req_s)
    source: str  # the point's p99_ttft_ms, in requests.jsonl
    run: str
    label: str


@dataclass
class RateAnswer:
    """The planner's request-rate answer for one run's rate sweep (``plan_rates``; method ``RATE_METHOD``)."""

    campaign: str
    round: str | None
    engine: str
    weight_format: str | None
    run: str
    ttft_p99_ms: float
    itl_p99_ms: float | None
    points: list[RateMeasured] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # gated-out points' files, with the checks they failed
    status: str = "no_points"  # bracketed | highest_meets | none_meet | no_points
    non_monotone: list[float] = field(default_factory=list)
    binding: str | None = None
    request_rate_req_s: float | None = None
    lower: RateMeasured | None = None
    upper: RateMeasured | None = None
    achieved_rate_req_s: float | None = None  # interpolated like the rate
    next_rate_req_s: float | None = None
    stanza: str | None = None
    method: str = RATE_METHOD


def rate_stanza(rate_req_s: float, p: BenchPoint) -> str:
    """A ``[[phase]]`` stanza (collector.raw.plan's rate phase schema) measuring one more rate point with the
    measured point's lengths, arrivals and stop conditions (from the plan its run kept)."""
    plan = p.run.docs.plan
    rp = next((pt for pt in plan.points if pt.point_id == p.label), None) if plan is not None else None
    r = rp.rate if rp is not None else None
    name = "slo-next-r" + f"{rate_req_s:g}".replace(".", "_")  # phase names: letters, digits, - and _
    lines = [
        "[[phase]]",
        f'name = "{name}"',
        'kind = "rate"',
        f"request_rates = [{rate_req_s:g}]",
        f'arrival = "{r.arrival if r is not None else "poisson"}"',
    ]
    if r is not None and r.arrival == "gamma":
        lines.append(f"burstiness = {r.burstiness:g}")
    lines += [
        f"seed = {rp.seed if rp is not None else 0}",
        f"input_len = {rp.input_len if rp is not None else round(p.input_len_tokens or 0)}",
        f"output_len = {rp.output_len if rp is not None else p.requested_output_len_tokens}",
    ]
    if r is not None and r.max_concurrency is not None:
        lines.append(f"max_concurrency = {r.max_concurrency}")
    if r is not None and r.duration_s is not None:
        lines.append(f"duration_s = {r.duration_s:g}")
    if r is not None and r.max_requests is not None:
        lines.append(f"max_requests = {r.max_requests}")
    if r is None or (r.duration_s is None and r.max_requests is None):
        lines.append(f"max_requests = {p.result.num_prompts or p.result.completed}")
    return "\n".join(lines) + "\n"


def plan_rates(
    campaign: Campaign,
    ttft_p99_ms: float,
    itl_p99_ms: float | None = None,
    engine: str | None = None,
    gate_ok: Callable[[BenchPoint], bool] | None = None,
    weight_format_of: Callable | None = None,
) -> list[RateAnswer]:
    """The highest request rate meeting the p99 budget(s), per run with open-loop rate points
    (``RATE_METHOD``: the concurrency answer's bracketing and log2 interpolation on the offered rate). Where
    the points do not bracket: double the highest rate (it meets) or halve the lowest (none meets), as a
    ``[[phase]]`` stanza."""
    pts = [p for p in campaign.points() if p.test_kind == RATE_TEST_KIND and not p.warmup]
    out = []
    for run_name in sorted({p.run.name for p in pts}):
        mine = [p for p in pts if p.run.name == run_name]
        if engine is not None and mine[0].run.engine != engine:
            continue
        out.append(_plan_rate_sweep(campaign.name, mine, ttft_p99_ms, itl_p99_ms, gate_ok, weight_format_of))
    return out


def _rate_measured(p: BenchPoint) -> RateMeasured:
    recs = p.records
    return RateMeasured(
        request_rate_req_s=recs[0].request_rate if recs and recs[0].request_rate else 0.0,
        p99_ttft_ms=p.result.p99_ttft_ms if p.result.completed else None,
        p99_itl_ms=p.result.itl.p99_ms if p.result.completed else None,
        achieved_rate_req_s=metrics.achieved_rate_req_s(recs) if recs else None,
        source=p.cite("p99_ttft_ms"),
        run=p.run.name,
        label=p.label,
    )


def _plan_rate_sweep(
    campaign: str,
    sweep: list[BenchPoint],
    ttft_p99_ms: float,
    itl_p99_ms: float | None,
    gate_ok: Callable[[BenchPoint], bool] | None,
    weight_format_of: Callable | None,
) -> RateAnswer:
    run = sweep[0].run
    ans = RateAnswer(
        campaign=campaign,
        round=run.round,
        engine=run.engine,
        weight_format=_weight_format(sweep[0], weight_format_of),
        run=run.name,
        ttft_p99_ms=ttft_p99_ms,
        itl_p99_ms=itl_p99_ms,
    )
    by_m: dict[int, BenchPoint] = {}
    for p in sweep:
        if gate_ok is not None and not gate_ok(p):
            ans.excluded.append(p.cite())
            continue
        m = _rate_measured(p)
        if m.request_rate_req_s > 0:
            ans.points.append(m)
            by_m[id(m)] = p
    ans.points.sort(key=lambda m: m.request_rate_req_s)
    if not ans.points:
        return ans
    budgets = [("ttft", "p99_ttft_ms", ttft_p99_ms)]
    if itl_p99_ms is not None:
        budgets.append(("itl", "p99_itl_ms", itl_p99_ms))
    best: tuple[float, str, int] | None = None
    statuses = []
    for name, attr, b in budgets:
        status, i = _crossing(ans.points, attr, b)  # type: ignore[arg-type]
        statuses.append(status)
        if status == "bracketed" and i is not None:
            lo, hi = ans.points[i - 1], ans.points[i]
            x = interpolate_log2(
                lo.request_rate_req_s, getattr(lo, attr), hi.request_rate_req_s, getattr(hi, attr), b
            )
            if best is None or x < best[0]:
                best = (x, name, i)
    ans.status = "none_meet" if "none_meet" in statuses else "bracketed" if best else "highest_meets"
    top = best[2] - 1 if ans.status == "bracketed" and best else len(ans.points) - 1
    if ans.status != "none_meet":
        ans.non_monotone = [
            m.request_rate_req_s
            for m in ans.points[:top]
            if not all(_meets(m, attr, b) for _, attr, b in budgets)  # type: ignore[arg-type]
        ]
    if ans.status == "bracketed" and best is not None:
        x, ans.binding, i = best
        ans.request_rate_req_s, ans.lower, ans.upper = x, ans.points[i - 1], ans.points[i]
        lo, hi = ans.lower, ans.upper
        if lo.achieved_rate_req_s is not None and hi.achieved_rate_req_s is not None:
            ans.achieved_rate_req_s = value_at_log2(
                lo.request_rate_req_s,
                lo.achieved_rate_req_s,
                hi.request_rate_req_s,
                hi.achieved_rate_req_s,
                x,
            )
        return ans
    ref = ans.points[-1] if ans.status == "highest_meets" else ans.points[0]
    factor = 2.0 if ans.status == "highest_meets" else 0.5
    ans.next_rate_req_s = ref.request_rate_req_s * factor
    ans.stanza = rate_stanza(ans.next_rate_req_s, by_m[id(ref)])
    return ans


def describe_rate(ans: RateAnswer) -> list[str]:
    """The request-rate answer as plain English lines (the CLI prints them after the concurrency answers)."""
    where = f"{ans.campaign} {ans.round or ''} {ans.engine} {ans.run}".replace("  ", " ")
    budget = f"p99 TTFT ≤ {ans.ttft_p99_ms:g} ms" + (
        f", p99 ITL ≤ {ans.itl_p99_ms:g} ms" if ans.itl_p99_ms is not None else ""
    )
    out = [f"{where}: {budget} (open loop: request-rate points)"]
    if ans.excluded:
        out.append(f"  excluded by the point checks: {', '.join(ans.excluded)}")
    if ans.status == "no_points":
        return out + ["  no gated rate point to plan from"]
    if ans.status == "bracketed" and ans.lower is not None and ans.upper is not None:
        lo, hi = ans.lower, ans.upper
        attr, name = ("p99_itl_ms", "ITL") if ans.binding == "itl" else ("p99_ttft_ms", "TTFT")
        out += [
            f"  highest request rate meeting it: {ans.request_rate_req_s:.2f} req/s "
            f"(binding: p99 {ans.binding})",
            f"  method: {ans.method}",
            f"  bracketing points: {lo.request_rate_req_s:g} req/s p99 {name} {getattr(lo, attr):.1f} ms "
            f"({lo.source}); {hi.request_rate_req_s:g} req/s p99 {name} {getattr(hi, attr):.1f} ms "
            f"({hi.source})",
        ]
        if ans.achieved_rate_req_s is not None:
            out.append(f"  achieved rate there (same interpolation): {ans.achieved_rate_req_s:.3f} req/s")
    else:
        what = (
            "the highest measured rate meets it"
            if ans.status == "highest_meets"
            else "no measured rate meets it"
        )
        out.append(f"  not bracketed: {what}")
        out.append(f"  measure next: request rate {ans.next_rate_req_s:g} req/s; plan stanza:")
        out += ["    " + line for line in (ans.stanza or "").splitlines()]
    if ans.non_monotone:
        out.append(f"  note: p99 not monotone in rate: lower rates {ans.non_monotone} miss the budget")
    return out


def describe_any(ans: SloAnswer | RateAnswer) -> list[str]:
    """``describe`` for a concurrency answer, ``describe_rate`` for a request-rate one."""
    return describe_rate(ans) if isinstance(ans, RateAnswer) else describe(ans)


def _bracket_p99_ms(
    lower: Measured | RateMeasured, upper: Measured | RateMeasured
) -> dict[str, float | None]:
    """The two bracketing points' p99 TTFT and ITL, ms, as an answer finding's fields
    ``{lower,upper}_p99_{ttft,itl}_ms`` (the concurrency and the request-rate answer alike)."""
    return {
        "lower_p99_ttft_ms": lower.p99_ttft_ms,
        "upper_p99_ttft_ms": upper.p99_ttft_ms,
        "lower_p99_itl_ms": lower.p99_itl_ms,
        "upper_p99_itl_ms": upper.p99_itl_ms,
    }


def rate_answer_findings(ans: RateAnswer) -> list[fnd.Finding]:
    """The request-rate answer as a finding under topic ``slo`` (run level: one rate sweep per run)."""
    at = At(level="run", run=ans.run, engine=ans.engine, weight_format=ans.weight_format, topic="slo")(
        "slo_request_rate_req_s"
    )
    budget: dict[str, Any] = {
        "ttft_p99_budget_ms": ans.ttft_p99_ms,
        "itl_p99_budget_ms": ans.itl_p99_ms,
        "load": "open-loop",
    }
    if ans.status != "bracketed" or ans.lower is None or ans.upper is None:
        detail = {
            "no_points": "no gated rate point",
            "highest_meets": "the highest measured rate meets the budget",
            "none_meet": "no measured rate meets the budget",
        }[ans.status]
        return [
            fnd.not_available(
                at,
                "req/s",
                "slo_not_bracketed",
                detail,
                [m.source for m in ans.points] or ans.excluded,
                slo_status=ans.status,
                excluded=ans.excluded,
                next_rate_req_s=ans.next_rate_req_s,
                stanza=ans.stanza,
                **budget,
            )
        ]
    return [
        fnd.measured(
            at,
            ans.request_rate_req_s,
            "req/s",
            [ans.lower.source, ans.upper.source],
            detail=ans.method,
            binding=ans.binding,
            lower_rate_req_s=ans.lower.request_rate_req_s,
            upper_rate_req_s=ans.upper.request_rate_req_s,
            **_bracket_p99_ms(ans.lower, ans.upper),
            achieved_rate_req_s=ans.achieved_rate_req_s,
            excluded=ans.excluded,
            non_monotone=ans.non_monotone,
            **budget,
        )
    ]


def _weight_format(p: BenchPoint, of: Callable | None) -> str | None:
    """The weight format the point's run served (theoryctx.TheoryCtx.weight_format_for), None without it."""
    return of(p.run) if of is not None else None


def default_budget_ms(campaign: Campaign) -> tuple[float, str]:
    """The page's budget, ms: the reference study's 730 ms p99 TTFT for an imported campaign (basis
    ``reference``); for our own, a budget every sweep can bracket where one exists: with L the largest of the
    sweeps' lowest p99 TTFTs and H the smallest of their highest, sqrt(L × H) rounded up to 1 ms when L < H
    (basis ``geometric_mid``), else ``OWN_BUDGET_FACTOR`` × L (basis ``twice_lowest``)."""
    if not campaign.own:
        return REFERENCE_TTFT_P99_MS, "reference"
    lows, highs = [], []
    for rnd in campaign.rounds:
        for e in ENGINES:
            sweep = [p.result.p99_ttft_ms for p in sweep_points(campaign, rnd, e) if p.result.p99_ttft_ms]
            if sweep:
                lows.append(min(sweep))
                highs.append(max(sweep))
    if not lows:
        return REFERENCE_TTFT_P99_MS, "reference"
    low, high = max(lows), min(highs)
    if low < high:
        return float(math.ceil(math.sqrt(low * high))), "geometric_mid"
    return float(math.ceil(OWN_BUDGET_FACTOR * low)), "twice_lowest"


def describe(ans: SloAnswer) -> list[str]:
    """The answer as plain English lines (the CLI prints them)."""
    where = f"{ans.campaign} {ans.round or ''} {ans.engine}".replace("  ", " ")
    budget = f"p99 TTFT ≤ {ans.ttft_p99_ms:g} ms" + (
        f", p99 ITL ≤ {ans.itl_p99_ms:g} ms" if ans.itl_p99_ms is not None else ""
    )
    out = [f"{where}: {budget} ({ans.load}: concurrency points; rate sweeps are answered apart)"]
    if ans.status == "no_points":
        return out + [
            "  no gated sweep point to plan from"
            + (f" ({len(ans.excluded)} excluded)" if ans.excluded else "")
        ]
    if ans.status == "bracketed" and ans.lower is not None and ans.upper is not None:
        out += _describe_bracketed(ans, ans.lower, ans.upper)
    else:
        out += _describe_not_bracketed(ans)
    if ans.non_monotone:
        out.append(
            f"  note: p99 not monotone in concurrency: lower concurrencies {ans.non_monotone} miss the budget"
        )
    return out + _describe_settings(ans)


def _describe_bracketed(ans: SloAnswer, lo: Measured, hi: Measured) -> list[str]:
    out = [
        f"  highest concurrency meeting it: {ans.concurrency:.2f} (binding: p99 {ans.binding})",
        f"  method: {ans.method}",
    ]
    attr, name = ("p99_itl_ms", "ITL") if ans.binding == "itl" else ("p99_ttft_ms", "TTFT")
    out.append(
        f"  bracketing points: c={lo.concurrency} p99 {name} {getattr(lo, attr):.1f} ms ({lo.source}); "
        f"c={hi.concurrency} p99 {name} {getattr(hi, attr):.1f} ms ({hi.source})"
    )
    if ans.request_throughput_req_s is not None:
        out.append(
            f"  request throughput there (same interpolation): {ans.request_throughput_req_s:.3f} req/s"
        )
    if ans.goodput_req_s is not None:
        out.append(
            f"  goodput at c={lo.concurrency} (exact, per request): {ans.goodput_req_s:.3f} req/s "
            f"({ans.goodput_good} good requests)"
        )
    else:
        out.append(f"  goodput: n/a — {ans.goodput_reason}")
    return out


def _describe_not_bracketed(ans: SloAnswer) -> list[str]:
    what = (
        "the highest measured concurrency meets it"
        if ans.status == "highest_meets"
        else "no measured point meets it"
    )
    out = [f"  not bracketed: {what}"]
    if ans.next_concurrency is None:
        out.append("  concurrency 1 already misses the budget: no concurrency meets it on this configuration")
    else:
        out.append(f"  measure next: concurrency {ans.next_concurrency}; plan stanza:")
        out += ["    " + line for line in (ans.stanza or "").splitlines()]
    return out


def _describe_settings(ans: SloAnswer) -> list[str]:
    """The deployment settings (``_settings``) as lines: the admission limit, vLLM's --max-num-seqs and
    pool residents, llama.cpp's slots and context."""
    s = ans.settings
    out = []
    if "admission_limit" in s:
        out.append(
            f"  admit at most {s['admission_limit']} requests in flight in front of the server (429 beyond)"
        )
    if "max_num_seqs" in s or "residents_pool" in s:
        out += _describe_vllm_settings(ans)
    elif "np_slots" in s:
        out.append(
            f"  llama.cpp -np ≥ {s['np_slots']} with -c ≥ {s['ctx_tokens_min']} "
            f"({s['request_tokens']} tokens a slot)"
        )
    return out


def _describe_vllm_settings(ans: SloAnswer) -> list[str]:
    s = ans.settings
    line = (
        f"  vLLM --max-num-seqs {s['max_num_seqs']} (the KV capacity: the log's max concurrency, "
        "rounded down)"
        if "max_num_seqs" in s
        else "  vLLM"
    )
    if "residents_pool" in s:
        line += (
            f"; the KV pool ({s['kv_pool_tokens']:,} tokens, "
            f"{s['kv_blocks']:,} blocks of {s['block_size']}) "
            f"holds {s['residents_pool']} requests of {s['request_tokens']} tokens; the max_model_len "
            f"{s['max_model_len']} line: {s['max_concurrency_log']}x"
        )
        if ans.lower is not None and ans.lower.max_running is not None:
            line += f"; measured residents at c={ans.lower.concurrency}: {ans.lower.max_running:g}"
    out = [line]
    if "half_max_model_len" in s:
        out.append(
            f"  --max-model-len {s['half_max_model_len']}: the line becomes "
            f"{s['half_max_concurrency_line']:.2f}x; the pool (sized by memory) and these requests' "
            f"residents stay {s['half_residents_pool']}"
            + (" — but these requests no longer fit and are refused" if s["half_refuses_requests"] else "")
        )
    return out


def answer_findings(ans: SloAnswer) -> list[fnd.Finding]:
    """The answer as findings under topic ``slo`` (engine level)."""
    at = (
        At(level="run", run=ans.run, engine=ans.engine, weight_format=ans.weight_format, topic="slo")
        if ans.level == "run"
        else engine_at(ans.round, ans.engine, ans.weight_format, topic="slo")
    )
    budget: dict[str, Any] = {
        "ttft_p99_budget_ms": ans.ttft_p99_ms,
        "itl_p99_budget_ms": ans.itl_p99_ms,
        "load": ans.load,
    }
    if ans.status != "bracketed" or ans.lower is None or ans.upper is None:
        detail = {
            "no_points": "no gated sweep point",
            "highest_meets": "the highest measured concurrency meets the budget",
            "none_meet": "no measured point meets the budget",
        }[ans.status]
        return [
            fnd.not_available(
                at("slo_concurrency"),
                "requests",
                "slo_not_bracketed",
                detail,
                [m.source for m in ans.points],
                slo_status=ans.status,
                non_monotone=ans.non_monotone,
                next_concurrency=ans.next_concurrency,
                stanza=ans.stanza,
                **budget,
            )
        ]
    srcs = [ans.lower.source, ans.upper.source]
    out = [
        fnd.measured(
            at("slo_concurrency"),
            ans.concurrency,
            "requests",
            srcs,
            detail=ans.method,
            binding=ans.binding,
            lower_concurrency=ans.lower.concurrency,
            upper_concurrency=ans.upper.concurrency,
            **_bracket_p99_ms(ans.lower, ans.upper),
            lower_max_running=ans.lower.max_running,
            non_monotone=ans.non_monotone,
            **budget,
            **{k: v for k, v in ans.settings.items() if k != "source"},
        )
    ]
    if ans.request_throughput_req_s is not None:
        out.append(
            fnd.measured(at("slo_request_throughput_req_s"), ans.request_throughput_req_s, "req/s", srcs)
        )
    if ans.goodput_req_s is not None:
        out.append(
            fnd.measured(
                at("slo_goodput_req_s"),
                ans.goodput_req_s,
                "req/s",
                [ans.lower.source],
                at_concurrency=ans.lower.concurrency,
                good_requests=ans.goodput_good,
            )
        )
    else:
        out.append(
            fnd.not_available(
                at("slo_goodput_req_s"),
                "req/s",
                "no_request_records",
                ans.goodput_reason or "",
                [ans.lower.source],
            )
        )
    return out


def goodput_findings(
    campaign: Campaign,
    slos_ms: Mapping[str, float] | None,
    ctx: Context | None = None,
    weight_format_of: Callable | None = None,
    fallback_ms: Mapping[str, float] | None = None,
) -> list:
    """Per sweep point, goodput against the SLOs (``slos_for``: the analysis-time ones, else the sweep run's
    plan's ``[slo]``, else ``fallback_ms``; per request, exact from requests.jsonl); per sweep, the point with
    the highest goodput. A run without request records: one n/a per sweep saying why."""
    out: list[fnd.Finding] = []
    for rnd in campaign.rounds:
        for eng in ENGINES:
            pts = sweep_points(campaign, rnd, eng)
            if not pts:
                continue
            slos, basis = slos_for(pts[0].run, slos_ms, fallback_ms)
            if not slos:
                continue
            slo_extra: dict = {f"slo_{k}": v for k, v in slos.items()} | {"slo_basis": basis}
            sweep_at = engine_at(rnd, eng, _weight_format(pts[0], weight_format_of), topic="goodput")
            rows = []
            for p in pts:
                g = point_goodput(p, slos)
                if g is None:
                    continue
                good, gp = g
                at = run_at(p.run, _weight_format(p, weight_format_of), topic="goodput")(
                    "goodput_req_s", test=p.label
                )
                if gp is None:
                    out.append(fnd.not_available(at, "req/s", "unknown", "zero point duration", [p.cite()]))
                    continue
                rows.append((gp, p))
                out.append(
                    fnd.measured(
                        at,
                        gp,
                        "req/s",
                        [p.cite()],
                        concurrency=p.concurrency,
                        good_requests=good,
                        completed=p.result.completed,
                        request_throughput_req_s=p.result.request_throughput_req_s,
                        gate_ok=ctx.gate_ok(p) if ctx is not None else None,
                        **slo_extra,
                    )
                )
            if not rows:
                out.append(
                    fnd.not_available(
                        sweep_at("goodput_max_req_s"),
                        "req/s",
                        "no_request_records",
                        "no requests.jsonl: per-request goodput needs each request's latencies; "
                        "goodput from percentiles is not per-request goodput",
                        [pts[0].cite()],
                        **slo_extra,
                    )
                )
                continue
            gp, p = max(rows, key=lambda t: (t[0], -_sweep_concurrency(t[1])))
            out.append(
                fnd.measured(
                    sweep_at("goodput_max_req_s"),
                    gp,
                    "req/s",
                    [p.cite()],
                    concurrency=p.concurrency,
                    **slo_extra,
                )
            )
    return out


def max_running(ctx: Context) -> Callable[[BenchPoint], float | None]:
    """Per point, the running gauge's highest sample in its aligned window (None without a sampler)."""

    def of(p: BenchPoint) -> float | None:
        w = ctx.window(p)
        g = getattr(w, "gauges", {}).get("running") if w is not None else None
        return g.max if g is not None else None

    return of


def run(s: SectionInput) -> Section:
    """The SLO section: goodput per point and sweep (against the SLOs given at analysis time, else the plan's
    ``[slo]``, else the page's budget as a per-request TTFT SLO) and the planner's answers for the campaign's
    default budget (``default_budget_ms``): the highest concurrency per sweep (table ``slo_plan``) and the
    highest request rate per rate sweep (``plan_rates``; table ``slo_rate_plan`` where rate points exist)."""
    campaign, ctx, th, slos_ms = s.campaign, s.ctx, s.th, s.slos_ms
    budget, basis = default_budget_ms(campaign)
    fmt = th.weight_format_for
    answers = plan(
        campaign, budget, gate_ok=ctx.gate_ok, window_max_running=max_running(ctx), weight_format_of=fmt
    )
    found = goodput_findings(campaign, slos_ms, ctx, fmt, fallback_ms={"ttft_ms": budget})
    goodput = {(f.run, f.test): f.value for f in found if f.metric == "goodput_req_s" and f.available}
    rate_answers = plan_rates(campaign, budget, gate_ok=ctx.gate_ok, weight_format_of=fmt)
    rate_rows = []
    for ra in rate_answers:
        found += rate_answer_findings(ra)
        for rm in ra.points:
            rate_rows.append(
                {
                    "round": ra.round or "",
                    "engine": ra.engine,
                    "run": ra.run,
                    "request_rate_req_s": rm.request_rate_req_s,
                    "achieved_rate_req_s": rm.achieved_rate_req_s,
                    "p99_ttft_ms": rm.p99_ttft_ms,
                    "p99_itl_ms": rm.p99_itl_ms,
                    "ttft_p99_budget_ms": budget,
                    "budget_basis": basis,
                    "bracketing": ra.lower is rm or ra.upper is rm,
                    "source": rm.source,
                }
            )
    rows = []
    for a in answers:
        found += [f for f in answer_findings(a)]
        for m in a.points:
            rows.append(
                {
                    "round": a.round or "",
                    "engine": a.engine,
                    "weight_format": a.weight_format,
                    "concurrency": m.concurrency,
                    "p99_ttft_ms": m.p99_ttft_ms,
                    "p99_itl_ms": m.p99_itl_ms,
                    "request_throughput_req_s": m.request_throughput_req_s,
                    "goodput_req_s": goodput.get((m.run, m.label)),
                    "ttft_p99_budget_ms": budget,
                    "budget_basis": basis,
                    "bracketing": a.lower is m or a.upper is m,
                    "source": m.source,
                }
            )
    tables = {"slo_plan": pd.DataFrame(rows)}
    if rate_rows:
        tables["slo_rate_plan"] = pd.DataFrame(rate_rows)
    return Section(name="slo", tables=tables, findings=found)
