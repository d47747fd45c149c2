"""KV linearity and capacity of imported runs: the pool vLLM logged against theory (pool bytes ÷ KV bytes
per token, known to the range the logged GiB's rounding leaves: ``pool.logged_gib_tolerance_pct``, the
tolerance ``own`` applies to our runs too), the length sweep's peak KV usage fitted against tokens in
flight, and predicted vs measured KV usage per concurrency point."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits, theory
from analysis.core.keys import At
from analysis.loading.campaign import BenchPoint, Campaign, RunData, iter_points
from analysis.reconcile import Context, Section, SectionInput
from analysis.reconcile.capacity.pool import (
    half_range_pct,
    half_unit_pct,
    logged_gib_tolerance_pct,
    pool_tokens_measured,
)
from analysis.reconcile.theoryctx import TheoryCtx

GIB = theory.GIB
BLOCK_SIZE_DEFAULT = 16
# A peak-usage fit whose slope is within this of 1 token per token in flight is a reconciliation;
# the slope absorbs block rounding (≤ 15 tokens per request) and the 1 Hz sampler missing the very peak.
KV_SLOPE_TOLERANCE_PCT = 5.0
# A point's peak KV usage needs a few gauge samples inside its window: one or two ticks of a short point
# land anywhere on its ramp (the CPU smoke campaign's points last less than a sampler interval).
MIN_SAMPLES_FOR_PEAK = 3
# what a round states about its pool: (key, unit); n/a together when it kept no vLLM start-up log
POOL_KEYS = (
    ("kv_pool_gib_log", "GiB"),
    ("kv_pool_tokens_log", "tokens"),
    ("max_concurrency_log", "requests"),
    ("kv_pool_tokens_theory", "tokens"),
    ("max_concurrency_theory", "requests"),
)
# the linearity fit's findings: (key, unit); R² has no unit
FIT_KEYS = (("kv_fit_slope", "tokens/token"), ("kv_fit_intercept", "tokens"), ("kv_fit_r2", ""))


def tokens_in_flight(concurrency: int, input_len: float, output_len: float) -> float:
    """KV tokens a full batch holds at its end, tokens: concurrency × (input + output)."""
    return concurrency * (input_len + output_len)


def usage_tokens(kv_usage_fraction: float, pool_tokens: int) -> float:
    """KV usage in tokens: usage fraction (0–1, vLLM's gauge) × pool tokens."""
    return kv_usage_fraction * pool_tokens


def pool_row(run: RunData, th: TheoryCtx) -> dict[str, Any] | None:
    """An imported run's logged vLLM pool (GiB, tokens, maximum concurrency) beside the theory from the logged
    pool bytes, one row of table kv_pool; None for our own runs and without a 'KV cache size' line."""
    rel, log = run.vllm_log
    if rel is None or log is None or run.engine != "vllm" or log.kv_cache_tokens is None:
        return None
    if run.own or log.kv_cache_memory_gib is None:
        return None  # our own runs: reconciled exactly by the capacity section
    mml = log.max_concurrency_tokens_per_request or log.max_model_len
    row: dict[str, Any] = {
        "round": run.round or "",
        "test": run.test,
        "run": run.name,
        "kv_pool_gib_log": log.kv_cache_memory_gib,
        "kv_pool_tokens_log": log.kv_cache_tokens,
        "max_concurrency_log": log.max_concurrency_x,
        "max_model_len_tokens": mml,
        "source_gib": run.cite(rel, log.lines.get("kv_cache_memory_gib")),
        "source_tokens": run.cite(rel, log.lines.get("kv_cache_tokens")),
        "source_concurrency": run.cite(rel, log.lines.get("max_concurrency_x")),
    }
    kvb = th.kv_bytes_per_token_for("vllm")
    if kvb is not None and log.kv_cache_memory_gib is not None:
        pool_bytes = log.kv_cache_memory_gib * GIB
        blocks = theory.vllm_num_gpu_blocks(pool_bytes, BLOCK_SIZE_DEFAULT, kvb)
        lo, hi = theory.vllm_tokens_range_for_logged_gib(log.kv_cache_memory_gib, kvb, BLOCK_SIZE_DEFAULT)
        row.update(
            {
                "kv_bytes_per_token": kvb,
                "kv_pool_tokens_theory": theory.kv_pool_tokens(pool_bytes, kvb),
                "kv_pool_tokens_theory_blocks": theory.vllm_kv_cache_tokens(blocks, BLOCK_SIZE_DEFAULT),
                "kv_pool_tokens_theory_min": lo,
                "kv_pool_tokens_theory_max": hi,
                "max_concurrency_theory": theory.vllm_max_concurrency(blocks, BLOCK_SIZE_DEFAULT, mml)
                if mml
                else None,
                # the same pool with --max-model-len halved (the log states concurrency for full-length
                # requests)
                "max_concurrency_theory_half_model_len": theory.vllm_max_concurrency(
                    blocks, BLOCK_SIZE_DEFAULT, mml // 2
                )
                if mml
                else None,
                "max_concurrency_theory_min": lo / mml if mml else None,
                "max_concurrency_theory_max": hi / mml if mml else None,
            }
        )
    rel_s, scrape = run.scrape
    cc = scrape.cache_config() if scrape is not None else None
    if rel_s is not None and cc is not None:
        row["kv_pool_tokens_scrape"] = cc.kv_cache_size_tokens
        row["num_gpu_blocks_scrape"] = cc.num_gpu_blocks
        row["source_scrape"] = run.cite(rel_s, cc.line)
    return row


def run(s: SectionInput) -> Section:
    campaign, ctx, th = s.campaign, s.ctx, s.th
    findings: list[fnd.Finding] = []
    pools = [r for r in (pool_row(run, th) for run in campaign.runs) if r is not None]
    fit_rows: list[dict[str, Any]] = []
    pred_rows: list[dict[str, Any]] = []
    for rnd in campaign.rounds:
        rp = [r for r in pools if r["round"] == (rnd or "")]
        pool_tokens, pool_findings = _pool_findings(campaign, rnd, rp, th)
        findings += pool_findings
        rows, fit_findings = _fit_findings(campaign, ctx, rnd, pool_tokens)
        fit_rows += rows
        findings += fit_findings
        if pool_tokens is not None:
            pred_rows += _predicted_rows(campaign, ctx, rnd, pool_tokens)
    tables = {
        "kv_pool": pd.DataFrame(pools),
        "kv_fit": pd.DataFrame(fit_rows),
        "kv_usage_predicted": pd.DataFrame(pred_rows),
    }
    return Section(name="kv", tables=tables, findings=findings)


def _pool_findings(
    campaign: Campaign, rnd: str | None, rp: list[dict[str, Any]], th: TheoryCtx
) -> tuple[int | None, list[fnd.Finding]]:
    """The round's pool, tokens (the first vLLM start-up log's; our own runs' measured pool when the round
    logged none), and its findings: logged vs theory, or n/a without a log."""
    at = At(round=rnd)
    if not rp and campaign.own:
        own_pools = (pool_tokens_measured(r)[0] for r in campaign.select(round=rnd, engine="vllm") if r.own)
        return next((t for t in own_pools if t), None), []
    if not rp:
        why = f"no vLLM start-up log in {rnd or 'the campaign'}"
        return None, [fnd.not_available(at(k), u, "no_server_log", why) for k, u in POOL_KEYS]
    r0 = sorted(rp, key=lambda r: r["run"])[0]
    logged = at.with_(run=r0["run"], engine="vllm")  # the pool the first vLLM start-up log reports
    out = [fnd.measured(logged("kv_pool_gib_log"), r0["kv_pool_gib_log"], "GiB", [r0["source_gib"]])]
    if "kv_pool_tokens_theory" in r0:
        out += _pool_theory_findings(at, logged, r0, th)
    if len({r["kv_pool_tokens_log"] for r in rp}) > 1:
        vals = sorted(r["kv_pool_tokens_log"] for r in rp)
        out.append(
            fnd.measured(
                at("kv_pool_tokens_log_spread"),
                vals[-1] - vals[0],
                "tokens",
                [r["source_tokens"] for r in rp],
                per_run={r["run"]: r["kv_pool_tokens_log"] for r in rp},
            )
        )
    scraped = [r for r in rp if "kv_pool_tokens_scrape" in r]
    if scraped:
        rs = scraped[0]
        out.append(
            fnd.measured(
                at("kv_pool_tokens_scrape"),
                rs["kv_pool_tokens_scrape"],
                "tokens",
                [rs["source_scrape"]],
                theory=float(rs["kv_pool_tokens_log"]),
                tolerance_pct=0.0,
                detail="vllm:cache_config_info kv_cache_size_tokens vs the log line",
            )
        )
    return r0["kv_pool_tokens_log"], out


def _pool_theory_findings(at: At, logged: At, r0: dict[str, Any], th: TheoryCtx) -> list[fnd.Finding]:
    """The logged pool and maximum concurrency against the theory from the logged pool bytes, each within
    the range the logged GiB's rounding leaves (concurrency: + its own two-decimal rounding)."""
    lo, hi = r0["kv_pool_tokens_theory_min"], r0["kv_pool_tokens_theory_max"]
    tol = logged_gib_tolerance_pct(
        r0["kv_pool_gib_log"], r0["kv_bytes_per_token"], BLOCK_SIZE_DEFAULT, r0["kv_pool_tokens_theory"]
    )
    mc_th = r0["max_concurrency_theory"]
    # vLLM prints the concurrency with two decimals: widen by its rounding
    mc_tol = half_range_pct(r0["max_concurrency_theory_min"], r0["max_concurrency_theory_max"], mc_th)
    mc_tol += half_unit_pct(mc_th)
    theory_src = [r0["source_gib"], *th.model_source]
    return [
        fnd.measured(
            logged("kv_pool_tokens_log"),
            r0["kv_pool_tokens_log"],
            "tokens",
            [r0["source_tokens"]],
            theory=float(r0["kv_pool_tokens_theory"]),
            tolerance_pct=tol,
            theory_range=[lo, hi],
            within_logged_gib_rounding=lo <= r0["kv_pool_tokens_log"] <= hi,
        ),
        fnd.measured(
            at("kv_pool_tokens_theory"),
            r0["kv_pool_tokens_theory"],
            "tokens",
            theory_src,
            detail="floor(Available KV cache memory × 2^30 ÷ KV bytes per token)",
            kv_bytes_per_token=r0["kv_bytes_per_token"],
        ),
        fnd.measured(
            logged("max_concurrency_log"),
            r0["max_concurrency_log"],
            "requests",
            [r0["source_concurrency"]],
            theory=mc_th,
            tolerance_pct=mc_tol,
        ),
        fnd.measured(
            at("max_concurrency_theory"),
            mc_th,
            "requests",
            theory_src,
            detail="num_gpu_blocks ÷ ceil(max_model_len ÷ 16), blocks from the logged pool bytes",
            max_model_len_tokens=r0["max_model_len_tokens"],
        ),
        fnd.measured(
            at("max_concurrency_theory_half_model_len"),
            r0["max_concurrency_theory_half_model_len"],
            "requests",
            theory_src,
            detail="num_gpu_blocks ÷ ceil((max_model_len ÷ 2) ÷ 16): the limit the log would "
            "state with --max-model-len halved; blocks are allocated as a request "
            "grows, so what really fits depends on the requests' own lengths",
            max_model_len_tokens=r0["max_model_len_tokens"] // 2,
        ),
    ]


def _peak_usage(ctx: Context, p: BenchPoint) -> float | None:
    """A point's peak KV usage fraction (0–1) in its window; None with fewer than MIN_SAMPLES_FOR_PEAK
    gauge samples."""
    w = ctx.window(p)
    g = w.gauges.get("kv_usage") if w is not None else None
    return g.max if g is not None and g.n >= MIN_SAMPLES_FOR_PEAK else None


def _fit_findings(
    campaign: Campaign, ctx: Context, rnd: str | None, pool_tokens: int | None
) -> tuple[list[dict[str, Any]], list[fnd.Finding]]:
    """Linearity: the length sweep's peak KV usage (tokens) fitted against tokens in flight; the fitted
    points (table kv_fit) and the slope, intercept and R², or why they are n/a."""
    at = At(round=rnd)
    ls = list(iter_points(campaign, round=rnd, engine="vllm", test_kind="length_sweep"))
    # (point, peak usage fraction, tokens in flight): tokens in flight need the lengths
    usable = [
        (p, peak, x)
        for p in ls
        if (peak := _peak_usage(ctx, p)) is not None and (x := _in_flight(p)) is not None
    ]
    if len(usable) < 2 or pool_tokens is None:
        return [], _fit_unavailable(campaign, rnd, ls)
    rows: list[dict[str, Any]] = []
    xs, ys = [], []
    for p, peak, x in usable:
        y = usage_tokens(peak, pool_tokens)
        xs.append(x)
        ys.append(y)
        rows.append(
            {
                "round": rnd or "",
                "point": p.label,
                "test_kind": p.test_kind,
                "concurrency": p.concurrency,
                "input_len_tokens": p.input_len_tokens,
                "output_len_tokens": p.requested_output_len_tokens,
                "tokens_in_flight": x,
                "peak_kv_usage_fraction": peak,
                "peak_kv_usage_tokens": y,
                "gate_ok": ctx.gate_ok(p),
                "source": p.cite(),
            }
        )
    fit = fits.least_squares(xs, ys)
    for r, x in zip(rows, xs, strict=True):
        r["fit_tokens"] = fit.predict(x)
    first = usable[0][0].run
    src = [first.cite(first.counter_source or "", "kv_usage"), *[p.cite() for p, _, _ in usable]]
    out = [
        fnd.measured(
            at("kv_fit_slope"),
            fit.slope,
            "tokens/token",
            src,
            theory=1.0,
            tolerance_pct=KV_SLOPE_TOLERANCE_PCT,
            n=fit.n,
            detail="peak KV usage (tokens) vs concurrency × (input + output)",
        ),
        fnd.measured(at("kv_fit_intercept"), fit.intercept, "tokens", src),
        fnd.measured(at("kv_fit_r2"), fit.r2, "", src),
    ]
    return rows, out


def _in_flight(p: BenchPoint) -> float | None:
    """tokens_in_flight of a point; None without its concurrency or lengths."""
    if p.concurrency is None or p.input_len_tokens is None or p.requested_output_len_tokens is None:
        return None
    return tokens_in_flight(p.concurrency, p.input_len_tokens, p.requested_output_len_tokens)


def _fit_unavailable(campaign: Campaign, rnd: str | None, ls: list[BenchPoint]) -> list[fnd.Finding]:
    """Why the round's linearity fit is n/a: the length sweep ran on an engine without a KV usage gauge, there
    is none, or too few of its points (or no pool) to fit."""
    at = At(round=rnd)
    other = [p for p in iter_points(campaign, round=rnd, test_kind="length_sweep") if p.run.engine != "vllm"]
    if not ls and other:
        # llama.cpp's /metrics (this build) has no KV usage gauge: its length sweep cannot be fitted
        engines = ", ".join(sorted({p.run.engine for p in other}))
        why = f"the length sweep ran on {engines} only, whose /metrics carry no KV usage gauge to fit"
        src = [other[0].run.cite(other[0].run.counter_source or "")]
        return [fnd.not_available(at(n), u, "no_kv_usage_gauge", why, src) for n, u in FIT_KEYS]
    if not ls:
        why = f"no length sweep in {rnd or 'the campaign'}"
        return [fnd.not_available(at(n), u, "no_such_test", why) for n, u in FIT_KEYS]
    own = ls[0].run.own
    reason = "too_few_points" if own else "no_sampler_csv"
    why = (
        f"fewer than 2 length-sweep points with ≥ {MIN_SAMPLES_FOR_PEAK} kv_usage samples in their window"
        if own
        else f"{ls[0].run.cite_root} kept no sampler CSV (kv_usage)"
    )
    return [fnd.not_available(at(n), u, reason, why, [p.cite() for p in ls]) for n, u in FIT_KEYS]


def _predicted_rows(
    campaign: Campaign, ctx: Context, rnd: str | None, pool_tokens: int
) -> list[dict[str, Any]]:
    """Predicted (tokens in flight) vs measured peak KV usage of every vLLM point with a window and its
    lengths."""
    rows = []
    for p in iter_points(campaign, round=rnd, engine="vllm"):
        w = ctx.window(p)
        if w is None or p.concurrency is None or p.input_len_tokens is None:
            continue
        if p.requested_output_len_tokens is None:
            continue
        g = w.gauges.get("kv_usage")
        if g is None or g.max is None:
            continue
        pred = tokens_in_flight(p.concurrency, p.input_len_tokens, p.requested_output_len_tokens)
        rows.append(
            {
                "round": rnd or "",
                "test": p.run.test,
                "point": p.label,
                "concurrency": p.concurrency,
                "predicted_peak_kv_tokens": pred,
                "predicted_peak_kv_usage_pct": min(100.0, pred / pool_tokens * 100),
                "measured_peak_kv_usage_pct": g.max * 100,
                "measured_peak_kv_tokens": usage_tokens(g.max, pool_tokens),
                "gate_ok": ctx.gate_ok(p),
            }
        )
    return rows
