"""The concurrency planner: per sweep, the highest concurrency whose p99 TTFT (and p99 ITL) stays within the
budget, the stanza to measure next where the points do not bracket it, the deployment settings that follow,
and the answer as plain English lines (``describe``). The method is in the package docstring."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from analysis.core import theory
from analysis.loading.campaign import BenchPoint, Campaign
from analysis.reconcile.concurrency import run_sweep_points, sweep_points
from analysis.reconcile.slo.budgets import (
    ENGINES,
    interpolate_log2,
    point_goodput,
    point_weight_format,
    value_at_log2,
)

# vLLM's block size on CUDA when neither the plan nor the command line names one
VLLM_DEFAULT_BLOCK = 16
METHOD = (
    "p99 per measured point; the highest concurrency within the budget and the next one up bracket the "
    "answer; "
    "p99 linear in log2(concurrency) between them; with two budgets the lower concurrency binds"
)


@dataclass(frozen=True)
class PlannerPoint:
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
    points: list[PlannerPoint] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # gated-out points' files
    status: str = "no_points"  # bracketed | highest_meets | none_meet | no_points
    # lower concurrencies over the budget below the answer (p99 not monotone in concurrency: few requests)
    non_monotone: list[int] = field(default_factory=list)
    binding: str | None = None  # "ttft" or "itl"
    concurrency: float | None = None
    lower: PlannerPoint | None = None
    upper: PlannerPoint | None = None
    request_throughput_req_s: float | None = None
    output_throughput_tok_s: float | None = None  # interpolated like the request throughput
    goodput_req_s: float | None = None  # exact, at the lower bracketing point
    goodput_good: int | None = None
    goodput_reason: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    next_concurrency: int | None = None
    stanza: str | None = None
    load: str = "closed-loop only"
    method: str = METHOD
    # "engine": the round's engine (its first sweep run); "run": a further sweep of our own with another
    # weight format (its findings are addressed by the run)
    level: str = "engine"


def meets_budget(p: PlannerPoint, attr: str, budget: float) -> bool:
    v = getattr(p, attr)
    return v is not None and v <= budget


def budget_crossing(pts: list[PlannerPoint], attr: str, budget: float) -> tuple[str, int | None]:
    """('bracketed', i): pts[i - 1] is the highest concurrency within the budget and pts[i], the next one, is
    over it; 'highest_meets' (the highest measured concurrency is within) or 'none_meet'."""
    meets = [i for i, p in enumerate(pts) if meets_budget(p, attr, budget)]
    if not meets:
        return "none_meet", None
    if meets[-1] == len(pts) - 1:
        return "highest_meets", None
    return "bracketed", meets[-1] + 1


def _next_point(pts: list[PlannerPoint], status: str) -> int | None:
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


def _settings(ans: SloAnswer, pt: BenchPoint) -> dict[str, Any]:
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
    out: dict[str, Any] = {"request_tokens": req_tokens}
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


def answer_concurrency(
    campaign: Campaign,
    ttft_p99_ms: float,
    itl_p99_ms: float | None = None,
    engine: str | None = None,
    gate_ok: Callable[[BenchPoint], bool] | None = None,
    window_max_running: Callable[[BenchPoint], float | None] | None = None,
    weight_format_of: Callable[..., Any] | None = None,
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
    weight_format_of: Callable[..., Any] | None = None


def sweep_concurrency(p: BenchPoint) -> int:
    """A sweep point's concurrency (every sweep point has one: concurrency.run_sweep_points)."""
    assert p.concurrency is not None
    return p.concurrency


def _measured(p: BenchPoint, readers: PointReaders) -> PlannerPoint:
    return PlannerPoint(
        concurrency=sweep_concurrency(p),
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
    allpts = sorted(sweep, key=sweep_concurrency)
    if not allpts:
        return None
    ok = [p for p in allpts if readers.gate_ok is None or readers.gate_ok(p)]
    ans = SloAnswer(
        campaign=campaign,
        round=rnd,
        engine=eng,
        weight_format=point_weight_format(allpts[0], readers.weight_format_of),
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
            m.concurrency
            for m in ans.points[:top]
            if not all(meets_budget(m, attr, b) for _, attr, b in budgets)
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
        status, i = budget_crossing(ans.points, attr, b)
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


def _describe_bracketed(ans: SloAnswer, lo: PlannerPoint, hi: PlannerPoint) -> list[str]:
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
