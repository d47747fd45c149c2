"""Issue #26's deployment ladder on the H200: from the campaign's default, one change per step (GPU sampling,
slots, weight format, prefix cache, batch sizes), every arm under the same open-loop chat traffic, all in one
machine lease, the baseline repeated at the end. What each step buys in goodput at the plans' SLO.

An arm is a run name of ``ARMS`` (its repeats: ``experiments.repeat_of``). Per arm and offered rate, from the
run's requests.jsonl (``rates.point_row``): goodput at the plan's ``[slo]`` (per request, vllm bench's
semantics), the share of requests that met it, achieved rate, p50/p99 TTFT and ITL; over repeats the mean and
the spread (max − min). Per arm:

- ``goodput_max_req_s``: the highest goodput over its rates (mean over repeats);
- ``held_rate_req_s``: the highest offered rate at which at least ``HELD_SHARE`` of the requests met the SLO
  (0 when none); a rate the arm holds is a rate it serves within the SLO;
- ``saturation_req_s``: the first offered rate whose achieved rate falls short by more than
  ``rates.SATURATION_SHORTFALL_PCT`` (the rate page's rule; ``NOT_SATURATED`` when none);
- ``gpu_busy_pct``: nvidia-smi's utilization.gpu averaged over the samples inside the rate points at and above
  ``BUSY_FROM_RATE`` (the share of time a kernel ran): below ~100 % with the server saturated, the GPU waited.

A step's goodput ratio is this arm's ``goodput_max_req_s`` ÷ the previous arm's. Its spread: the larger of
the two arms' relative repeat spreads and one request's worth of goodput (1 ÷ good requests, relative): a
point's goodput cannot resolve less. A step ``paid`` when the ratio exceeds 1 by more than that spread,
``cost`` when it falls short of 1 by more, else it is ``within_spread``.

Predictions are data in each arm's plan: ``# PREDICT <quantity> <lo> <hi>`` lines written before the run
(the plan copy in the run folder is what is read; the line is cited). Quantities: ``goodput_max_req_s``,
``goodput_step_ratio``, ``saturation_req_s`` and ``<p50|p99>_<ttft|itl>_ratio_at_<rate>`` (this arm's
percentile at that offered rate ÷ the previous arm's). Verdicts: ``experiments.verdict`` on [m − s, m + s].
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.loading import scrape_series
from analysis.loading.campaign import BenchPoint, Campaign, RunData
from analysis.reconcile import Context, Section, SectionInput, rates
from analysis.reconcile import experiments as ex

NAME = "ladder"
TOPIC = "ladder"
H200 = "h200-qwen2.5-7b-random"
ARMS = (
    "ladder-0-baseline",
    "ladder-1-gpusampling",
    "ladder-2-slots",
    "ladder-3-f16",
    "ladder-4-prefixcache",
    "ladder-5-batch",
)
HELD_SHARE = 0.9  # a rate is held when at least 90 % of its requests met the SLO
NOT_SATURATED = 99.0  # saturation_req_s when no rate fell short (the plans' PREDICT convention)
BUSY_FROM_RATE = 6.0  # gpu_busy_pct averages the rate points from here up (every arm saturated there)
PREDICT = re.compile(r"^# PREDICT (?P<q>\S+) (?P<lo>\S+) (?P<hi>\S+)\s*$")
RATIO_AT = re.compile(r"^(?P<metric>p(?:50|99)_(?:ttft|itl))_ratio_at_(?P<rate>[0-9.]+)$")


def held_rate_req_s(shares: Sequence[tuple[float, float]]) -> float:
    """The highest offered rate [req/s] whose share of requests meeting the SLO is ≥ ``HELD_SHARE``; 0.0
    when no rate is held. ``shares``: (offered rate, good requests ÷ requests) per point."""
    held = [rate for rate, share in shares if share >= HELD_SHARE]
    return max(held) if held else 0.0


def step_ratio(value: float, previous: float) -> float:
    """A step's ratio = this arm's value ÷ the previous arm's (dimensionless)."""
    return value / previous


def step_verdict(ratio: float, spread_rel: float, capped: bool = False) -> str:
    """``capped`` when both arms' best points served every request within the SLO at the same offered rate
    (their goodput is that rate's, less the point's tail: the rate grid, not the server, set it); else
    ``paid`` when ratio − 1 > the relative spread, ``cost`` when 1 − ratio > it, else ``within_spread``."""
    if capped:
        return "capped"
    if ratio - 1.0 > spread_rel:
        return "paid"
    if 1.0 - ratio > spread_rel:
        return "cost"
    return "within_spread"


def saturation_rate(rows: Sequence[dict[str, Any]]) -> float:
    """The first offered rate [req/s] whose shortfall exceeds ``rates.SATURATION_SHORTFALL_PCT``;
    ``NOT_SATURATED`` when none did."""
    for r in sorted(rows, key=lambda r: r["request_rate_req_s"]):
        if r["shortfall_pct"] is not None and r["shortfall_pct"] > rates.SATURATION_SHORTFALL_PCT:
            return float(r["request_rate_req_s"])
    return NOT_SATURATED


# --- one run, one arm ---------------------------------------------------------------------------------------


def gpu_busy_pct(run: RunData, pts: Sequence[BenchPoint]) -> float | None:
    """Mean nvidia-smi utilization.gpu [%] over the samples taken inside the given points (first send to last
    stream end of each); None without samples there."""
    _rel, scrapes = run.scrapes
    if scrapes is None:
        return None
    samples = scrape_series.gpu_busy_samples(scrapes.records)
    vals = []
    for p in pts:
        recs = p.records
        if recs:
            t0, t1 = min(r.send_mono_ns for r in recs), max(r.end_mono_ns for r in recs)
            vals += [u for t, u in samples if t0 <= t <= t1]
    return math.fsum(vals) / len(vals) if vals else None


@dataclass
class RunRates:
    run: RunData
    rows: list[dict[str, Any]]  # rates.point_row per rate point, by offered rate
    gpu_busy_pct: float | None

    @property
    def goodput_max(self) -> float:
        return max(r["goodput_req_s"] or 0.0 for r in self.rows)

    @property
    def resolution_rel(self) -> float:
        """One request's worth of goodput at the best point, relative: (1 ÷ duration) ÷ (good ÷ duration)."""
        best = max(self.rows, key=lambda r: r["goodput_req_s"] or 0.0)
        if not best["good_requests"]:
            return 0.0
        resolution: float = 1.0 / best["good_requests"]
        return resolution

    @property
    def best(self) -> dict[str, Any]:
        return max(self.rows, key=lambda r: (r["goodput_req_s"] or 0.0, -r["request_rate_req_s"]))

    def row_at(self, rate: float) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["request_rate_req_s"] == rate), None)


def _run_rates(run: RunData, ctx: Context) -> RunRates | None:
    plan = run.docs.plan
    slos = dict(plan.slo) if plan is not None else {}
    pts = [
        p
        for p in sorted(run.points, key=lambda p: p.order)
        if p.test_kind == rates.RATE_KIND and not p.warmup
    ]
    rows = [r for p in pts if (r := rates.point_row(p, slos, ctx, None)) is not None]
    if not rows:
        return None
    for r in rows:
        r["good_share"] = r["good_requests"] / r["requests"] if r["requests"] else 0.0
    busy = gpu_busy_pct(
        run, [p for p in pts if p.records and (p.records[0].request_rate or 0.0) >= BUSY_FROM_RATE]
    )
    return RunRates(run, sorted(rows, key=lambda r: r["request_rate_req_s"]), busy)


def _cell(rr: RunRates, rate: float, col: str) -> float | None:
    """One run's value of ``col`` at an offered rate; None where the run has no point there."""
    row = rr.row_at(rate)
    value: float | None = row.get(col) if row else None
    return value


@dataclass
class LadderArm:
    name: str
    runs: list[RunRates]

    def values(self, fn: Callable[[RunRates], float | None]) -> list[float]:
        return [v for rr in self.runs if (v := fn(rr)) is not None]

    def mean_spread(self, fn: Callable[[RunRates], float | None]) -> tuple[float | None, float | None]:
        vals = self.values(fn)
        return (ex.mean(vals), ex.repeat_spread(vals)) if vals else (None, None)

    @property
    def goodput(self) -> tuple[float, float | None]:
        m, s = self.mean_spread(lambda rr: rr.goodput_max)
        assert m is not None
        return m, s

    def spread_rel(self) -> float:
        """The larger of the repeat spread (relative) and one request's worth of goodput (relative)."""
        m, s = self.goodput
        rel = (s / m) if (s is not None and m) else 0.0
        return max(rel, *(rr.resolution_rel for rr in self.runs))

    def at(self, rate: float, col: str) -> tuple[float | None, float | None]:
        return self.mean_spread(lambda rr: _cell(rr, rate, col))


def arm_of(campaign: Campaign, ctx: Context, name: str) -> LadderArm | None:
    """The arm ``name`` with its repeats (``experiments.repeat_of``) in repeat order; None without a rate
    run."""
    runs = sorted(
        (r for r in campaign.experiment_runs if ex.repeat_of(r.name, name) is not None),
        key=lambda r: ex.repeat_of(r.name, name) or 0,
    )
    rrs = [rr for r in runs if (rr := _run_rates(r, ctx)) is not None]
    return LadderArm(name, rrs) if rrs else None


def _arms(campaign: Campaign, ctx: Context) -> list[LadderArm]:
    return [a for name in ARMS if (a := arm_of(campaign, ctx, name)) is not None]


# --- tables -------------------------------------------------------------------------------------------------

POINT_COLS = (
    "request_rate_req_s",
    "achieved_rate_req_s",
    "shortfall_pct",
    "requests",
    "good_requests",
    "good_share",
    "goodput_req_s",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "output_throughput_tok_s",
    "gate_ok",
    "source",
)


def _point_rows(arms: list[LadderArm]) -> list[dict[str, Any]]:
    return [
        {"step": i, "arm": a.name, "run": rr.run.name, **{c: row[c] for c in POINT_COLS}}
        for i, a in enumerate(arms)
        for rr in a.runs
        for row in rr.rows
    ]


@dataclass
class Step:
    index: int
    arm: LadderArm
    previous: LadderArm | None
    baseline: LadderArm

    @property
    def ratio(self) -> float | None:
        return None if self.previous is None else step_ratio(self.arm.goodput[0], self.previous.goodput[0])

    @property
    def spread_rel(self) -> float | None:
        return None if self.previous is None else max(self.arm.spread_rel(), self.previous.spread_rel())

    @property
    def capped(self) -> bool:
        """Every run of both arms had its best point at one offered rate with every request good."""
        if self.previous is None:
            return False
        bests = [rr.best for a in (self.arm, self.previous) for rr in a.runs]
        return len({b["request_rate_req_s"] for b in bests}) == 1 and all(
            b["good_share"] == 1.0 for b in bests
        )

    @property
    def verdict(self) -> str | None:
        r, s = self.ratio, self.spread_rel
        return None if r is None or s is None else step_verdict(r, s, self.capped)


def _steps(arms: list[LadderArm]) -> list[Step]:
    return [Step(i, a, arms[i - 1] if i else None, arms[0]) for i, a in enumerate(arms)]


def first_unheld_rate(rr: RunRates) -> float | None:
    """The lowest offered rate [req/s] above the held one (``held_rate_req_s``); None when all are held."""
    held = held_rate_req_s(_shares(rr))
    above = [r["request_rate_req_s"] for r in rr.rows if r["request_rate_req_s"] > held]
    return min(above) if above else None


def _step_rows(steps: list[Step]) -> list[dict[str, Any]]:
    """Per arm: goodput, held and saturation rates, GPU busy share, the step's ratio and verdict, and the
    share of requests within the SLO at the first rate the baseline does not hold (where arms can differ)."""
    unheld = first_unheld_rate(steps[0].arm.runs[0])
    rows = []
    for st in steps:
        a = st.arm
        gp, gs = a.goodput
        busy, _ = a.mean_spread(lambda rr: rr.gpu_busy_pct)
        rows.append(
            {
                "step": st.index,
                "arm": a.name,
                "runs": len(a.runs),
                "goodput_max_req_s": gp,
                "goodput_spread_req_s": gs,
                "held_rate_req_s": min(held_rate_req_s(_shares(rr)) for rr in a.runs),
                "saturation_req_s": min(saturation_rate(rr.rows) for rr in a.runs),
                "gpu_busy_pct": busy,
                "step_ratio": st.ratio,
                "step_spread_pct": None if st.spread_rel is None else st.spread_rel * 100.0,
                "verdict": st.verdict,
                "ratio_to_baseline": step_ratio(gp, st.baseline.goodput[0]),
                "first_unheld_rate_req_s": unheld,
                "good_share_at_unheld": a.at(unheld, "good_share")[0] if unheld is not None else None,
                "goodput_at_unheld_req_s": a.at(unheld, "goodput_req_s")[0] if unheld is not None else None,
            }
        )
    return rows


def _shares(rr: RunRates) -> list[tuple[float, float]]:
    return [(r["request_rate_req_s"], r["good_share"]) for r in rr.rows]


# --- predictions --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Predict:
    arm: str
    quantity: str
    lo: float
    hi: float
    cite: str


def plan_predictions(run: RunData, arm: str) -> list[Predict]:
    """The ``# PREDICT`` lines of the plan.toml copy in the run folder, each cited by its line."""
    path = run.info.path / "plan.toml"
    if not path.is_file():
        return []
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = PREDICT.match(line)
        if m:
            out.append(Predict(arm, m["q"], float(m["lo"]), float(m["hi"]), run.cite("plan.toml", i)))
    return out


def _ratio_at(st: Step, metric: str, rate: float) -> tuple[float | None, float | None]:
    """This arm's percentile at ``rate`` ÷ the previous arm's, and the spread of that ratio from the two arms'
    relative repeat spreads (the baseline's where an arm has one run)."""
    if st.previous is None:
        return None, None
    col = f"{metric}_ms"
    (m1, s1), (m0, s0) = st.arm.at(rate, col), st.previous.at(rate, col)
    if m1 is None or m0 is None or not m0:
        return None, None
    bm, bs = st.baseline.at(rate, col)
    base_rel = (bs / bm) if (bs is not None and bm) else None
    rels = [
        x
        for x in (
            (s1 / m1) if s1 is not None and m1 else None,
            (s0 / m0) if s0 is not None else None,
            base_rel,
        )
        if x is not None
    ]
    ratio = m1 / m0
    return ratio, (ratio * max(rels)) if rels else None


def _measure(pr: Predict, st: Step) -> tuple[float | None, float | None]:
    """(measured value, its spread) for one prediction."""
    if pr.quantity == "goodput_max_req_s":
        return st.arm.goodput[0], st.arm.goodput[0] * st.arm.spread_rel()
    if pr.quantity == "goodput_step_ratio":
        r, s = st.ratio, st.spread_rel
        return (r, None if r is None or s is None else r * s)
    if pr.quantity == "saturation_req_s":
        sats = [saturation_rate(rr.rows) for rr in st.arm.runs]
        return min(sats), max(sats) - min(sats)
    m = RATIO_AT.match(pr.quantity)
    if m:
        return _ratio_at(st, m["metric"], float(m["rate"]))
    return None, None


def _prediction_rows(steps: list[Step]) -> list[dict[str, Any]]:
    rows = []
    for st in steps:
        for pr in plan_predictions(st.arm.runs[0].run, st.arm.name):
            m, s = _measure(pr, st)
            # a rate is a grid value, not a continuous measurement: its spread is 0 when the repeats agree
            spread = 0.0 if pr.quantity == "saturation_req_s" and s is not None else s
            v = None if m is None else ex.verdict("bound", m, spread, pr.lo, pr.hi)
            rows.append(
                {
                    "step": st.index,
                    "arm": pr.arm,
                    "quantity": pr.quantity,
                    "predicted_lo": pr.lo,
                    "predicted_hi": pr.hi,
                    "measured": m,
                    "spread": s,
                    "verdict": v,
                    "plan": pr.cite,
                }
            )
    return rows


# --- findings -----------------------------------------------------------------------------------------------


def _arm_at(a: LadderArm) -> At:
    plan = a.runs[0].run.docs.plan
    wf = plan.model.weight_format if plan is not None else None
    return At(level="run", run=a.name, engine="llamacpp", weight_format=wf, topic=TOPIC)


def _step_findings(rows: list[dict[str, Any]], steps: list[Step]) -> list[fnd.Finding]:
    out = []
    for row, st in zip(rows, steps, strict=True):
        at = _arm_at(st.arm)
        srcs = [r["source"] for rr in st.arm.runs for r in rr.rows]
        common = {"step": st.index, "runs": row["runs"]}
        out.append(
            fnd.measured(
                at("goodput_max_req_s"),
                row["goodput_max_req_s"],
                "req/s",
                srcs,
                spread=row["goodput_spread_req_s"],
                **common,
            )
        )
        out.append(
            fnd.measured(
                at("held_rate_req_s"), row["held_rate_req_s"], "req/s", srcs, share=HELD_SHARE, **common
            )
        )
        if row["gpu_busy_pct"] is not None:
            out.append(
                fnd.measured(
                    at("gpu_busy_pct"),
                    row["gpu_busy_pct"],
                    "%",
                    srcs,
                    from_rate_req_s=BUSY_FROM_RATE,
                    **common,
                )
            )
        if st.previous is not None:
            out.append(
                fnd.measured(
                    at("goodput_step_ratio"),
                    row["step_ratio"],
                    "x",
                    srcs,
                    verdict=row["verdict"],
                    spread_pct=row["step_spread_pct"],
                    previous=st.previous.name,
                    first_unheld_rate_req_s=row["first_unheld_rate_req_s"],
                    good_share_at_unheld=row["good_share_at_unheld"],
                    **common,
                )
            )
    return out


def _total_finding(rows: list[dict[str, Any]], steps: list[Step]) -> fnd.Finding:
    last, first = steps[-1].arm, steps[0].arm
    srcs = [r["source"] for a in (first, last) for rr in a.runs for r in rr.rows]
    return fnd.measured(
        At(topic=TOPIC)("ladder_total_ratio"),
        step_ratio(last.goodput[0], first.goodput[0]),
        "x",
        srcs,
        first_arm=first.name,
        last_arm=last.name,
        first_goodput_req_s=first.goodput[0],
        last_goodput_req_s=last.goodput[0],
        paid=[r["arm"] for r in rows if r["verdict"] == "paid"],
        cost=[r["arm"] for r in rows if r["verdict"] == "cost"],
        capped=[r["arm"] for r in rows if r["verdict"] == "capped"],
        within_spread=[r["arm"] for r in rows if r["verdict"] == "within_spread"],
        held_rates_req_s=sorted({r["held_rate_req_s"] for r in rows}),
        gpu_busy_max_pct=max(
            (r["gpu_busy_pct"] for r in rows if r["gpu_busy_pct"] is not None), default=None
        ),
    )


def prediction_row(pr: Predict, m: float | None, s: float | None) -> dict[str, Any]:
    """One plan prediction against its measurement [m − s, m + s] (``experiments.verdict``; None when
    unmeasured)."""
    v = None if m is None else ex.verdict("bound", m, s, pr.lo, pr.hi)
    return {
        "quantity": pr.quantity,
        "predicted_lo": pr.lo,
        "predicted_hi": pr.hi,
        "measured": m,
        "spread": s,
        "verdict": v,
        "plan": pr.cite,
    }


def predicted(at: At, r: dict[str, Any], unit: str = "", **extra: Any) -> fnd.Finding:
    """A prediction row as a finding citing its plan line: the measurement, or n/a when the runs hold none."""
    extra = {k: r[k] for k in ("predicted_lo", "predicted_hi", "spread", "verdict")} | extra
    if r["measured"] is None:
        return fnd.not_available(
            at, unit, "unknown", "the runs hold no value for this quantity", [r["plan"]], **extra
        )
    return fnd.measured(at, r["measured"], unit, [r["plan"]], **extra)


def _prediction_findings(rows: list[dict[str, Any]]) -> list[fnd.Finding]:
    return [
        predicted(
            At(level="run", run=r["arm"], engine="llamacpp", topic=TOPIC)(f"predicted_{r['quantity']}"),
            r,
            step=r["step"],
            quantity_kind="latency_ratio" if RATIO_AT.match(r["quantity"]) else "capacity",
        )
        for r in rows
    ]


def run(s: SectionInput) -> Section:
    campaign, ctx = s.campaign, s.ctx
    if campaign.name != H200:
        return Section(name=NAME)
    arms = _arms(campaign, ctx)
    if len(arms) < 2:
        return Section(name=NAME)
    steps = _steps(arms)
    step_rows, pred_rows = _step_rows(steps), _prediction_rows(steps)
    found = [
        *_step_findings(step_rows, steps),
        _total_finding(step_rows, steps),
        *_prediction_findings(pred_rows),
    ]
    tables = {"ladder_points": _point_rows(arms), "ladder_steps": step_rows, "ladder_predictions": pred_rows}
    return Section(name=NAME, tables={k: pd.DataFrame(v) for k, v in tables.items() if v}, findings=found)
