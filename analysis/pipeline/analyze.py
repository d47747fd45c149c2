"""`collector analyze`: raw store → parsed campaign → aligned windows → gates → sections → tables,
Vega-Lite specs and findings.json per campaign. One way only; nothing here reads a clock or the network,
so the same raw input gives byte-identical output."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.core import charts, metrics
from analysis.core import findings as fnd
from analysis.core.findings import FindingSet, dumps, write_table
from analysis.core.keys import At, series_id
from analysis.core.windows import PointTiming, align_points
from analysis.loading import scrape_series
from analysis.loading.campaign import Campaign, RunData, campaign_names, load_campaign, verify_campaign
from analysis.parse.sampler_csv import COLUMNS
from analysis.pipeline.cache import AnalysisCache, entry_key
from analysis.pipeline.schedule import Analysed, analysed
from analysis.reconcile import (
    Context,
    Section,
    SectionInput,
    comparison,
    concurrency,
    differences,
    experiments,
    gates,
    ladder,
    ladder_endpoint,
    length_counters,
    lengths,
    model_size,
    overload,
    point_details,
    prediction,
    provenance,
    rates,
    reproducibility,
    slo,
    slot_history,
    speculative,
    theoryctx,
    ttft,
)
from analysis.reconcile.capacity import arith as capacity_arith
from analysis.reconcile.capacity import kv, memory, prefix_cache
from analysis.reconcile.capacity import own as capacity
from analysis.reconcile.concurrency import depth as concurrency_depth
from analysis.reconcile.engines import depth as engines_depth
from analysis.reconcile.engines import points as engines
from analysis.reconcile.engines import selection
from analysis.reconcile.gates import totals as workload_totals
from analysis.reconcile.lengths import costs as length_costs
from analysis.reconcile.overload import cadence as overload_cadence
from analysis.reconcile.overload import depth as overload_depth
from analysis.reconcile.reproducibility import tails as repro_tails
from analysis.reconcile.roofline import ceilings, flops_phases, structure, structure_totals
from analysis.reconcile.roofline import points as roofline
from collector.raw.errors import AnatomyError
from collector.raw.store import RUN_STATES

SAMPLER_COUNTERS = (
    "preemptions",
    "queue_sum",
    "queue_cnt",
    "prefill_sum",
    "prefill_cnt",
    "decode_sum",
    "decode_cnt",
    "iter_tok_sum",
    "iter_tok_cnt",
    "flops",
    "read_bytes",
)
SAMPLER_GAUGES = ("running", "waiting", "kv_usage", "gpu_mem_used_mib", "gpu_util", "power_w", "temp_c")


def sampler_columns(table) -> tuple[list[float], dict[str, list[float]]]:
    """The sampler record's columns by their CSV names (what citations use), None → NaN."""
    ts = table.column("ts_s")
    cols = {}
    for csv_name, fieldname in COLUMNS.items():
        if csv_name in table.columns:
            cols[csv_name] = [float("nan") if v is None else float(v) for v in table.column(fieldname)]
    return ts, cols


def align_own(run, ctx: Context) -> None:
    """A collector run: windows on its own monotonic clock, counters from its /metrics scrapes."""
    srel, scrapes = run.scrapes
    rrel, log = run.requests
    if scrapes is None or log is None:
        return
    ts, cols, lines = scrape_series.series(scrapes.records, str(run.info.path / srel))
    if not ts:
        return
    ctx.sampler_series[run.name] = (ts, cols)
    ctx.sample_lines[run.name] = lines
    send, end = log.columns.ints("send_mono_ns"), log.columns.ints("end_mono_ns")
    for p in run.points:
        idx = log.points.get(p.label)
        if idx is None or not len(idx):
            continue
        win = scrape_series.point_window(send[idx].tolist(), end[idx].tolist())
        ctx.windows[p.key] = scrape_series.window_data(ts, cols, win)


def align(campaign: Campaign, ctx: Context) -> None:
    """Per run with a sampler CSV: find the client's clock offset from activity and cut every point's window.
    A collector run needs no offset: see align_own."""
    for run in campaign.all_runs:
        if run.own:
            align_own(run, ctx)
            continue
        rel, table = run.sampler
        if rel is None or table is None or not table.rows:
            continue
        timings = [
            PointTiming(p.key, p.end_naive_utc_s, p.result.duration_s)
            for p in run.points
            if p.end_naive_utc_s is not None
        ]
        if not timings:
            continue
        ts, cols = sampler_columns(table)
        est, wins = align_points(ts, cols, timings, SAMPLER_COUNTERS, SAMPLER_GAUGES)
        ctx.offsets[run.name] = (est, run.cite(rel))
        ctx.windows.update(wins)
        ctx.sampler_series[run.name] = (ts, cols)


def analyze_campaign(campaign: Campaign, out_dir: Path, raw_roots: list[Path] | None = None) -> list[str]:
    return _analyze_campaign(campaign, out_dir, raw_roots or [])[0]


def _capacity_by_series(
    campaign: Campaign, th, tables: dict[str, pd.DataFrame], found: FindingSet
) -> list[dict]:
    """Per series (engine + weight format): the pool the server reported, with its theory where one exists."""
    out: list[dict] = []
    cap = tables.get("capacity")
    if cap is not None and len(cap):
        for _, r in cap.iterrows():
            fmt = th.run_formats.get(r["run"])
            key = series_id(r["engine"], fmt[0] if fmt else None)
            if r["engine"] == "vllm":
                t = r.get("kv_pool_tokens_theory")
                out.append(
                    {
                        "series_key": key,
                        "tokens": int(r["kv_pool_tokens_log"]),
                        "theory": None if pd.isna(t) else float(t),
                        "source": r["source"],
                    }
                )
            else:
                t = r.get("ctx_total_flag")
                out.append(
                    {
                        "series_key": key,
                        "tokens": int(r["capacity_tokens"])
                        if "capacity_tokens" in r and not pd.isna(r["capacity_tokens"])
                        else None,
                        "theory": None if t is None or pd.isna(t) else float(t),
                        "source": r["source"],
                    }
                )
        return out
    rounds: list[str | None] = [r for r in campaign.rounds if r is not None] or [None]
    f = found.find(metric="kv_pool_tokens_log", round=rounds[-1])
    if f is not None and f.available:
        out.append(
            {
                "series_key": series_id("vllm", th.weight_formats.get("vllm")),
                "tokens": f.value,
                "theory": f.theory,
                "tolerance_pct": f.tolerance_pct,
                "source": f.sources[0],
            }
        )
    for run in campaign.select(round=rounds[-1], engine="llamacpp"):
        rel, log = run.server_log
        if (
            rel is not None
            and log is not None
            and getattr(log, "n_slots", None)
            and getattr(log, "n_ctx_slot", None)
        ):
            out.append(
                {
                    "series_key": series_id("llamacpp", th.weight_formats.get("llamacpp")),
                    "tokens": log.n_slots * log.n_ctx_slot,
                    "theory": None,
                    "source": run.cite(rel, log.lines.get("n_slots")),
                }
            )
            break
    return out


def profile(campaign: Campaign, th: theoryctx.TheoryCtx) -> dict:
    """What kind of campaign this is, for the report (index.json): collected by our collector or imported, the
    device (a CPU smoke campaign has no GPU), the descriptions the runs recorded about themselves."""
    devices = sorted({str(r.info.meta.get("gpu")) for r in campaign.all_runs if r.info.meta.get("gpu")})
    return {
        "collected": campaign.own,
        "cpu": campaign.own and devices == ["cpu"],
        "gpu": th.gpu.name if th.gpu else None,
        "gpu_display": th.gpu.display_name if th.gpu else None,
        "descriptions": sorted(
            {str(r.info.meta["description"]) for r in campaign.runs if r.info.meta.get("description")}
        ),
    }


def gated_context(campaign: Campaign) -> Context:
    """The shared state every section reads: aligned windows and the gate results per point."""
    ctx = Context(campaign=campaign)
    align(campaign, ctx)
    gates.evaluate(campaign, ctx)
    return ctx


def slo_answers(
    raw_roots: list[Path],
    ttft_p99_ms: float,
    itl_p99_ms: float | None = None,
    engine: str | None = None,
    campaigns: list[str] | None = None,
) -> list[slo.SloAnswer | slo.RateAnswer]:
    """`collector slo`: the SLO planner's answers (analysis.reconcile.slo.answer_concurrency: concurrency per
    sweep;
    slo.answer_rates: request rate per rate sweep) for every campaign named (all by default), on gated points,
    with the running gauge's peak per point where a sampler saw it."""
    roots = [Path(r) for r in raw_roots]
    names = campaigns or campaign_names(roots)
    if not names:
        raise AnatomyError(f"{', '.join(map(str, roots))}: no campaigns in the raw store")
    out: list[slo.SloAnswer | slo.RateAnswer] = []
    for name in names:
        campaign = load_campaign(roots, name)
        ctx = gated_context(campaign)
        th = theoryctx.build(campaign)
        out += slo.answer_concurrency(
            campaign,
            ttft_p99_ms,
            itl_p99_ms,
            engine,
            gate_ok=ctx.gate_ok,
            window_max_running=slo.max_running(ctx),
            weight_format_of=th.weight_format_for,
        )
        out += slo.answer_rates(  # open-loop rate sweeps: the highest request rate (issue #14 item 3)
            campaign,
            ttft_p99_ms,
            itl_p99_ms,
            engine,
            gate_ok=ctx.gate_ok,
            weight_format_of=th.weight_format_for,
        )
    return out


# Every reconcile section in the order its findings and tables are gathered (the run states and the sampler
# windows are the pipeline's own, gathered after the first two). Each is ``run(SectionInput) -> Section``.
SECTIONS = (
    structure,
    memory,
    gates,
    concurrency,
    concurrency_depth,
    ttft,
    kv,
    lengths,
    overload,
    overload_depth,
    engines,
    engines_depth,
    capacity,
    ceilings,
    prediction,
    roofline,
    selection,
    slo,
    rates,  # issue #14: open-loop rate sweeps
    reproducibility,
    prefix_cache,
    experiments,
    model_size,  # issue #15 experiment 4
    ladder,  # issue #26: the deployment ladder
    ladder_endpoint,  # issue #26: the chat-endpoint lead (the baseline on completions)
    slot_history,  # issue #26 item 3: the slot re-test under request histories
    speculative,  # issue #26: speculative decoding by its mechanism
    provenance,
    point_details,  # issue #22: the reference study's claims in its own words
    capacity_arith,
    length_costs,
    length_counters,
    overload_cadence,
    workload_totals,
    flops_phases,
    structure_totals,
    repro_tails,
)


def _analyze_campaign(
    campaign: Campaign, out_dir: Path, raw_roots: list[Path], slos_ms: dict[str, float] | None = None
) -> tuple[list[str], comparison.CampaignSummary]:
    ctx = gated_context(campaign)
    th = theoryctx.build(campaign)
    points = concurrency.points_frame(campaign, ctx, th)
    inp = SectionInput(campaign, ctx, th, points, slos_ms, list(raw_roots))
    sections = [runs_section(campaign), *(m.run(inp) for m in SECTIONS[:2]), window_section(campaign, ctx)]
    sections += [m.run(inp) for m in SECTIONS[2:]]
    found, tables = _collect(campaign, sections, points)
    specs = _write_campaign(campaign, out_dir, th, found, tables)
    summary = comparison.CampaignSummary(
        name=campaign.name,
        tables=tables,
        findings=found,
        gpu=th.gpu.name if th.gpu else None,
        gpu_display=th.gpu.display_name if th.gpu else None,
        bandwidth_datasheet_bytes_per_s=th.gpu.bandwidth_bytes_per_s if th.gpu else None,
        bandwidth_measured_bytes_per_s=th.ceilings.copy_bytes_per_s if th.ceilings else None,
        capacity=_capacity_by_series(campaign, th, tables, found),
        model_name=th.cfg.name if th.cfg else None,
        model_shape=(
            th.cfg.hidden_size,
            th.cfg.intermediate_size,
            th.cfg.num_hidden_layers,
            th.cfg.num_attention_heads,
            th.cfg.num_key_value_heads,
            th.cfg.head_dim,
            th.cfg.vocab_size,
        )
        if th.cfg
        else None,
    )
    return _report_lines(campaign, out_dir, found, tables, specs), summary


def _collect(
    campaign: Campaign, sections: list[Section], points: pd.DataFrame
) -> tuple[FindingSet, dict[str, pd.DataFrame]]:
    """Every section's findings and tables in one set, each marked with the state of the runs it comes
    from; the differences from a first reading of the files, from those tables."""
    found = FindingSet()
    tables: dict[str, pd.DataFrame] = {"points": points}
    states = RunStates(campaign)
    for s in sections:
        found.extend(states.mark(f.with_campaign(campaign.name)) for f in s.findings)
        for name, df in s.tables.items():
            if name in tables:
                raise ValueError(f"table {name} written twice")
            tables[name] = df
    # the differences from a first reading of the files, from the tables the sections above wrote
    found.extend(states.mark(f.with_campaign(campaign.name)) for f in differences.run(tables).findings)
    return found, {name: states.mark_table(df) for name, df in tables.items()}


def _write_campaign(
    campaign: Campaign,
    out_dir: Path,
    th: theoryctx.TheoryCtx,
    found: FindingSet,
    tables: dict[str, pd.DataFrame],
) -> list[str]:
    """tables/*.csv, figures/*.vl.json, findings.json and index.json of one campaign; the figures written."""
    (out_dir / "tables").mkdir(parents=True, exist_ok=True)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    for name in sorted(tables):
        write_table(out_dir / "tables" / f"{name}.csv", tables[name])
    specs, figures_missing = charts.figure_specs(tables)
    if not campaign.own:
        # an imported campaign's roofline is drawn by engines_itl_roofline; roofline_points feeds the
        # comparison
        specs = {k: v for k, v in specs.items() if k not in charts.OWN_CAMPAIGN_FIGURES}
        figures_missing = {k: v for k, v in figures_missing.items() if k not in charts.OWN_CAMPAIGN_FIGURES}
    for name in sorted(specs):
        (out_dir / "figures" / f"{name}.vl.json").write_text(dumps(specs[name]), encoding="utf-8")
    fnd.write_findings(out_dir / "findings.json", found)
    index = {
        "campaign": campaign.name,
        "profile": profile(campaign, th),
        "tables": sorted(tables),
        "figures": sorted(specs),
        # a figure with nothing to draw is not written; the page says why (reason: a labels_zh.REASONS code)
        "figures_missing": figures_missing,
        "findings": found.keys(),
        # the trust chain: were the runs verified before reading (False: `analyze --no-verify`), and each
        # run's state (collector.raw.store.RUN_STATES); runs that could not be parsed, with the reason
        "verified": campaign.verified,
        "run_states": {
            **{r.name: r.state for r in campaign.all_runs},
            **{b.name: b.state for b in campaign.broken},
        },
        "unparsed_runs": {b.name: b.reason for b in campaign.broken},
        # runs a `collector exclude` decision (raw/<campaign>/decisions.jsonl) leaves out, with the reason
        "excluded_runs": campaign.excluded,
    }
    (out_dir / "index.json").write_text(dumps(index), encoding="utf-8")
    return sorted(specs)


def _report_lines(
    campaign: Campaign, out_dir: Path, found: FindingSet, tables: dict[str, pd.DataFrame], figures: list[str]
) -> list[str]:
    """What `analyze` prints for a campaign: its counts, then every run that is not sealed-complete."""
    n_bad = sum(1 for k in found.keys() if found[k].status == "mismatch")
    n_na = sum(1 for k in found.keys() if found[k].status == "n/a")
    lines = [
        f"{campaign.name}: {len(found)} findings ({n_bad} mismatch, {n_na} n/a), {len(tables)} tables, "
        f"{len(figures)} figures -> {out_dir}"
        + (f" ({len(campaign.excluded)} run(s) left out by decision)" if campaign.excluded else "")
    ]
    if not campaign.verified:
        lines.append(
            f"{campaign.name}: UNVERIFIED (--no-verify): the runs were read without checking their seals"
        )
    for r in campaign.all_runs:
        if r.state != "sealed-complete":
            lines.append(f"{campaign.name}/{r.name}: {r.state}; its findings say so")
    for b in campaign.broken:
        lines.append(f"{campaign.name}/{b.name}: not analysed ({b.state}): {b.reason}")
    return lines


def write_comparison(
    summaries: list[comparison.CampaignSummary], out: Path, states: dict[str, str | None] | None = None
) -> list[str]:
    """out/_comparison/: the cross-campaign findings, tables and figures (two or more campaigns). ``states``:
    each campaign's least trusted run state, carried by the findings that compare it."""
    tables, found = comparison.build(summaries)
    if states:

        def state_of(f: fnd.Finding) -> str | None:
            if f.campaign is None:  # across every campaign analysed
                return worst_state(set(states.values()))
            return worst_state({states.get(f.campaign), states.get(f.versus) if f.versus else None})

        found = FindingSet(f if state_of(f) is None else replace(f, run_state=state_of(f)) for f in found)
    cdir = Path(out) / comparison.DIR_NAME
    (cdir / "tables").mkdir(parents=True, exist_ok=True)
    (cdir / "figures").mkdir(parents=True, exist_ok=True)
    for name in sorted(tables):
        write_table(cdir / "tables" / f"{name}.csv", tables[name])
    specs, figures_missing = charts.comparison_figure_specs(tables)
    for name in sorted(specs):
        (cdir / "figures" / f"{name}.vl.json").write_text(dumps(specs[name]), encoding="utf-8")
    fnd.write_findings(cdir / comparison.FINDINGS_FILE, found)
    index = {
        "campaigns": sorted(s.name for s in summaries),
        "tables": sorted(tables),
        "figures": sorted(specs),
        "figures_missing": figures_missing,
        "findings": found.keys(),
    }
    (cdir / "index.json").write_text(dumps(index), encoding="utf-8")
    n_bad = sum(1 for k in found.keys() if found[k].status == "mismatch")
    return [
        f"comparison of {len(summaries)} campaigns: {len(found)} findings ({n_bad} mismatch), {len(tables)} "
        f"tables, {len(specs)} figures -> {cdir}"
    ]


def window_section(campaign: Campaign, ctx: Context) -> Section:
    """The clock offset found per run, and how well the windows line up with the sampler's activity."""
    rows = [
        {
            "round": run.round or "",
            "test": run.test,
            "point": p.label,
            "offset_s": ctx.offsets[run.name][0].offset_s,
            "window_start_s": w.window.start_s,
            "window_end_s": w.window.end_s,
            "first_active_s": w.activity.first_active_s,
            "last_active_s": w.activity.last_active_s,
            "end_lag_s": w.end_lag_s,
            "order": p.order,
        }
        for run in campaign.all_runs
        if run.name in ctx.offsets
        for p in run.points
        if (w := ctx.window(p)) is not None
    ]
    findings = [f for rnd in campaign.rounds for f in _round_window_findings(campaign, ctx, rnd)]
    return Section(name="windows", tables={"windows": pd.DataFrame(rows)}, findings=findings)


def _round_window_findings(campaign: Campaign, ctx: Context, rnd: str | None) -> list[fnd.Finding]:
    """A round's clock offset (none to find for collector runs; n/a without a sampler CSV), the worst end lag,
    and whether each run's points ran in its sweep log's order."""
    at = At(round=rnd, topic="windows")
    runs = [r for r in campaign.select(round=rnd) if r.name in ctx.offsets]
    own = [r for r in campaign.select(round=rnd) if r.own and r.name in ctx.sampler_series]
    if not runs and own:
        return [
            fnd.measured(
                at("client_clock_offset_s"),
                0.0,
                "s",
                [r.cite(r.counter_source or "") for r in own],
                detail="collector runs: requests and scrapes carry the same monotonic clock, so there "
                "is no offset to find; each point's counters are differenced between its own "
                "boundary scrapes",
                clock="CLOCK_MONOTONIC",
            )
        ]
    if not runs:
        why = f"no sampler CSV in {rnd}: the result dates cannot be checked"
        return [fnd.not_available(at("client_clock_offset_s"), "s", "no_sampler_csv", why)]
    offs = {r.name: ctx.offsets[r.name][0] for r in runs}
    values = sorted({o.offset_s for o in offs.values()})
    srcs = [ctx.offsets[r.name][1] for r in runs] + [p.cite("date") for r in runs for p in r.points][:3]
    out = [
        fnd.Finding(
            at=at("client_clock_offset_s"),
            value=values[0],
            unit="s",
            sources=tuple(srcs),
            status="ok" if len(values) == 1 else "mismatch",
            detail="result `date` (no zone) minus UTC, found as the offset whose windows hold the most "
            "running/waiting activity in the sampler CSV",
            extra={
                "per_run": {k: v.offset_s for k, v in offs.items()},
                "runner_up_offset_s": {k: v.runner_up_offset_s for k, v in offs.items()},
                "active_samples_in_windows": {k: v.active_in_windows for k, v in offs.items()},
                "samples_in_windows": {k: v.samples_in_windows for k, v in offs.items()},
            },
        )
    ]
    lags = [
        abs(w.end_lag_s)
        for w in (ctx.window(p) for r in runs for p in r.points)
        if w is not None and w.end_lag_s is not None
    ]
    if lags:
        why = "|last active sampler row − result end time|, worst point"
        out.append(fnd.measured(at("max_abs_end_lag_s"), max(lags), "s", srcs[: len(runs)], detail=why))
    return out + [f for r in runs if (f := _order_finding(at, r)) is not None]


def _order_finding(at: At, r: RunData) -> fnd.Finding | None:
    """Whether the run's logged points ended (result dates) in their sweep log's order; None without a log."""
    rel, sweep = r.sweep
    if rel is None or sweep is None:
        return None
    logged = [(p, p.sweep_point) for p in r.points if p.sweep_point is not None]
    by_log = [p.label for p, sp in sorted(logged, key=lambda x: x[1].index)]
    by_date = [p.label for p, _ in sorted(logged, key=lambda x: (x[0].end_naive_utc_s or 0.0, x[0].label))]
    return fnd.checked(
        at("order_matches_sweep_log", test=r.test),
        by_log == by_date,
        [r.cite(rel)],
        by_log=by_log,
        by_date=by_date,
    )


def runs_section(campaign: Campaign) -> Section:
    """Each run's state, and one n/a finding per run that could not be parsed (the reason is the parser's
    one-line error); the rest of the campaign is analysed without it."""
    rows = [
        {"run": r.name, "engine": r.engine or None, "run_state": r.state, "parsed": True, "reason": None}
        for r in campaign.all_runs
    ] + [
        {"run": b.name, "engine": b.engine, "run_state": b.state, "parsed": False, "reason": b.reason}
        for b in campaign.broken
    ]
    findings = [
        fnd.not_available(
            At(level="run", run=b.name, engine=b.engine, topic="trust")("parsed"),
            "",
            "run_unparseable",
            b.reason,
            [b.source],
        )
        for b in campaign.broken
    ] + [f for r in campaign.all_runs if (f := _bounded_scrapes_finding(r)) is not None]
    table = pd.DataFrame(rows, columns=["run", "engine", "run_state", "parsed", "reason"])
    table = table.sort_values("run", kind="mergesort").reset_index(drop=True)
    return Section(name="runs", tables={"run_states": table}, findings=findings)


def _bounded_scrapes_finding(r: RunData) -> fnd.Finding | None:
    """A collector run whose /metrics pages passed the stored bound: how many scrapes were stored as only the
    families analysis reads (its counters are whole; other families' series were counted, not kept)."""
    rel, scrapes = r.scrapes
    cut = scrape_series.bounded_scrapes(scrapes.records) if rel is not None and scrapes is not None else None
    if rel is None or cut is None:
        return None
    return fnd.measured(
        At(level="run", run=r.name, engine=r.engine, topic="trust")("metrics_bounded_scrapes"),
        cut.bounded,
        "scrapes",
        [r.cite(rel, cut.first_line)],
        detail=f"{cut.bounded} of {cut.scrapes} /metrics pages were larger than the run's stored bound "
        "([sampling] scrape_stored_max_bytes): stored as the families analysis reads, up to "
        f"{cut.max_dropped_series:,} series of other families a scrape counted, not kept",
        scrapes=cut.scrapes,
        max_dropped_series=cut.max_dropped_series,
    )


def worst_state(states: Iterable[str | None]) -> str | None:
    """The least trusted of run states (unsealed, then sealed-failed, then sealed-complete); None for none."""
    known = [s for s in states if s is not None]
    return max(known, key=RUN_STATES.index) if known else None


class RunStates:
    """Which runs a finding or a table row comes from (its ``run`` field, its citations), and so the state it
    carries: the least trusted of those runs' states (unsealed, then sealed-failed, then sealed-complete)."""

    def __init__(self, campaign: Campaign):
        self.by_name = {r.name: r.state for r in campaign.all_runs} | {
            b.name: b.state for b in campaign.broken
        }
        # runs with data, by engine: a finding citing nothing may come from any of them
        self.by_engine: dict[str | None, set[str]] = {None: {r.state for r in campaign.all_runs}}
        for r in campaign.all_runs:
            self.by_engine.setdefault(r.engine, set()).add(r.state)
        roots = [(r.cite_root, r.state) for r in campaign.all_runs] + [
            (b.cite_root, b.state) for b in campaign.broken
        ]
        self.by_root = sorted(roots, key=lambda x: -len(x[0]))  # the longest root first: nested folders

    def of_source(self, source: str) -> str | None:
        for root, state in self.by_root:
            if source == root or (source.startswith(root) and source[len(root)] in "/:#"):
                return state
        return None

    def of(self, run: str | None, sources: tuple[str, ...] | list[str]) -> str | None:
        states = {self.by_name.get(run)} if run else set()
        states |= {self.of_source(str(s)) for s in sources}
        return worst_state(states)

    def mark(self, f: fnd.Finding) -> fnd.Finding:
        """The finding with its run_state; one that names no run and cites no file (an aggregate over points,
        an n/a) gets the least trusted state of the runs it may come from (its engine's, else all)."""
        state = self.of(f.run, f.sources)
        if state is None:
            state = worst_state(self.by_engine.get(f.engine) or self.by_engine[None])
        return f if state is None else replace(f, run_state=state)

    def mark_table(self, df: pd.DataFrame) -> pd.DataFrame:
        """A ``run_state`` column for a table whose rows name their run (``run``, a point ``key`` run/label,
        or a ``source`` citation); other tables unchanged."""
        if df is None or df.empty or "run_state" in df.columns:
            return df
        if "run" in df.columns:
            col = df["run"].map(lambda v: self.by_name.get(v) if isinstance(v, str) else None)
        elif "key" in df.columns:
            col = df["key"].map(lambda v: self.by_name.get(v.split("/")[0]) if isinstance(v, str) else None)
        elif "source" in df.columns:
            col = df["source"].map(lambda v: self.of_source(v) if isinstance(v, str) else None)
        else:
            return df
        if col.isna().all():
            return df
        return df.assign(run_state=col)


def check_out_outside(out: Path, roots: list[Path]) -> None:
    """Refuse (one line) an output folder that is a raw root or inside one: results written there would
    overwrite sealed files or sit in the append-only store (links resolved, so an alias is caught too)."""
    where = out.resolve()
    for root in roots:
        r = root.resolve()
        if where == r or r in where.parents:
            raise AnatomyError(
                f"--out {out}: inside the raw store {root}; raw/ is append-only: write the results elsewhere "
                "(e.g. build/results)"
            )


def analyze(
    raw_roots: list[Path],
    out: Path,
    campaigns: list[str] | None,
    verify: bool = True,
    slos_ms: dict[str, float] | None = None,
    percentiles: tuple[float, ...] = metrics.DEFAULT_PERCENTILES,
    cache: Path | None = None,
    jobs: int | None = None,
) -> Iterator[str]:
    """Analyse each campaign into ``out/<campaign>/``. With ``verify`` (the default) every run folder of the
    campaigns is first checked as `collector verify` checks it, and a changed run stops the analysis with
    verify's line before anything is written; without, the results say ``verified: false``. With ``cache``
    (a folder), a campaign whose runs and analysis code did not change since it was kept there is copied
    from it instead of analysed (only with ``verify``: the seals vouch for the files); the campaigns left
    are analysed in ``jobs`` processes (default: one per core)."""
    roots = [Path(r) for r in raw_roots]
    check_out_outside(Path(out), roots)
    names = campaigns or campaign_names(roots)
    if not names:
        raise AnatomyError(f"{', '.join(map(str, roots))}: no campaigns in the raw store")
    known = set(campaign_names(roots))
    for name in names:
        if name not in known:
            raise AnatomyError(f"campaign {name!r} not found under {', '.join(map(str, roots))}")
    if verify:
        for name in names:
            verify_campaign(roots, name)
    options = {"slos_ms": slos_ms or {}, "percentiles": list(percentiles)}
    store = AnalysisCache(cache) if cache is not None and verify else None
    one = functools.partial(analyse_one, roots, Path(out), verify, slos_ms, percentiles)
    summaries = []
    states: dict[str, str | None] = {}
    for name, done in analysed(names, one, Path(out), store, lambda n: entry_key(roots, n, options), jobs):
        summaries.append(done.summary)
        states[name] = done.state
        yield from done.lines
    if len(summaries) >= 2:
        yield from write_comparison(summaries, Path(out), states)


def analyse_one(
    roots: list[Path],
    out: Path,
    verify: bool,
    slos_ms: dict[str, float] | None,
    percentiles: tuple[float, ...],
    name: str,
) -> Analysed:
    """One campaign loaded and analysed into ``out/<name>/`` (a module-level function: worker processes
    receive it by name)."""
    campaign = load_campaign(roots, name, verified=verify, percentiles=percentiles)
    out_dir = out / name
    out_dir.mkdir(parents=True, exist_ok=True)
    lines, summary = _analyze_campaign(campaign, out_dir, roots, slos_ms)
    return Analysed(lines, summary, worst_state({r.state for r in campaign.all_runs}))
