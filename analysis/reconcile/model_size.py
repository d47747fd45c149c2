"""Issue #15 experiment 4, model size: single-stream decode of five real shapes (Qwen2.5 0.5B, 1.5B, 3B, 7B,
14B; random weights) in two weight formats (F16, Q4_K_M) on one H200 lease — the bandwidth floor against the
measured step, and a fit of step time = a + bytes ÷ bw_eff per format.

The experiment is data in its plans (``experiments.spec``): each arm's ``[[experiment]]`` entry names its
size (``variant``), model config (the knob's ``value``) and weight format's tag (``series``: one fit per
series), its plan's table row predicting its ITL (a ``p50_itl_ms`` point prediction, shown beside the
measurement), and, in the 7B plans, the earlier 7B runs shown as context; the 7B F16 plan holds the verdict
predictions. Runs and arms follow the experiments' rule (an arm is a run name, ``-r<k>`` a repeat); each run's
plan.toml must state the arm's model config and weight format (checked, never assumed). The theory of a run
comes from ITS plan's ``model.config`` (the campaign's TheoryCtx holds the 7B); bytes per step from
``analysis.core.theory.weight_bytes_read_per_decode_step`` (a tied head read once, as the head); the floor at
the
run's own lease's measured copy bandwidth (its ceilings.json; the campaign's when a run has none).

Numbers: each run has one point (concurrency 1, 512 in / 256 out); its p50 ITL is ``BenchPoint.result``'s.
Per arm: the mean over repeats and the repeat spread (max − min); an arm with one run borrows the largest
relative spread of the repeated arms (the experiments' rule: every arm is at the same point).
Achievement = floor ÷ ITL (``roofline.achievement_pct``), its interval from the ITL's [m − s, m + s].

The fit (per format, one point per size: the arm's mean): ordinary least squares ITL [ms] = a + slope ×
bytes [GB] (``analysis.core.fits.least_squares``), bw_eff = 1 ÷ slope (GB/ms = TB/s). Its parameters'
intervals:
the fit repeated at every corner of the sizes' spread box (each size at its mean − s or + s, 2^5 fits); a and
the slope are linear in the ITLs, so their extremes are at corners exactly. The crossover bytes = a × bw_eff:
the size where streaming the weights takes as long as the fixed cost. The per-layer alternative: the
residuals' signs at the sizes the plan names, and a fit with a layer term (``fits.least_squares_plane``:
ITL = a0 + a_layer × layers + bytes ÷ bw_eff) — with five points and three parameters, two degrees of freedom.

Verdicts: ``experiments.verdict`` / ``combine`` on the interval, each prediction citing the plan.toml line
that stated it before the run.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis.core import findings as fnd
from analysis.core import fits, theory
from analysis.core.keys import At, series_id
from analysis.core.model_config import ModelConfig, load_model_config
from analysis.loading.campaign import PHASE_TEST_KIND, BenchPoint, Campaign, RunData
from analysis.reconcile import Section, SectionInput, run_at
from analysis.reconcile.experiments import (
    INF,
    combine,
    difference,
    distinguishable,
    mean,
    point_metrics,
    repeat_of,
    repeat_spread,
    spread_pct,
    verdict,
)
from analysis.reconcile.experiments.spec import (
    Arm,
    Experiment,
    Prediction,
    Target,
    load_experiments,
    plan_cite,
    plan_name,
    quote_line,
)
from analysis.reconcile.roofline import achievement_pct
from analysis.reconcile.theoryctx import TheoryCtx
from collector.raw.errors import AnatomyError

NAME = "model_size"
TOPIC = f"exp_{NAME}"
ENGINE = "llamacpp"
GB = 1e9


@dataclass(frozen=True)
class SizeSpec:
    """Experiment 4 as its plans define it (``experiments.load_experiments``): the arms (a size is the
    arm's ``variant``, its model config the knob's ``value``, its weight format's run-name tag the
    ``series``), the ITL each arm's plan predicted in its table, the verdict predictions and the plans of
    the earlier 7B runs shown as context."""

    exp: Experiment
    sizes: tuple[str, ...]  # in the plans' order
    formats: dict[str, str]  # series tag -> weight format (theory's name), in the plans' order
    predicted_itl: dict[str, tuple[str, float]]  # arm run -> (words on its table row, predicted ITL ms)
    predictions: tuple[Prediction, ...]
    context: tuple[str, ...]

    def arm(self, size: str, tag: str) -> Arm | None:
        return next((a for a in self.exp.arms if a.variant == size and a.series == tag), None)


def _is_table_row(p: Prediction) -> bool:
    """An arm's own predicted p50 ITL: its plan's table row, shown beside the measurement, not judged."""
    return p.quantity == "p50_itl_ms" and p.kind == "point"


def size_spec(campaign: Campaign) -> SizeSpec | None:
    exp = next((e for e in load_experiments(campaign) if e.name == NAME), None)
    if exp is None:
        return None
    rows = {p.arm: (p.plan[1], p.targets[0].value or 0.0) for p in exp.predictions if _is_table_row(p)}
    return SizeSpec(
        exp=exp,
        sizes=tuple(dict.fromkeys(a.variant for a in exp.arms)),
        formats={a.series or "": a.weight_format for a in exp.arms},
        predicted_itl=rows,
        predictions=tuple(p for p in exp.predictions if not _is_table_row(p)),
        context=tuple(c for a in exp.arms for c in a.context),
    )


def _format_at(weight_format: str) -> At:
    """The address of a finding about one format's five sizes (a fit): the series llama.cpp × format."""
    return At(
        level="series",
        engine=ENGINE,
        weight_format=weight_format,
        series=series_id(ENGINE, weight_format),
        topic=TOPIC,
    )


QUANTITY_UNITS = {
    "fit_r2": "",
    "fit_intercept_ms": "ms",
    "fit_bw_eff_tb_per_s": "TB/s",
    "achievement_pct": "%",
    "q4_minus_f16_intercept_ms": "ms",
    "q4_minus_f16_ms_per_gb": "ms/GB",
    "fit_residual_ms": "ms",
}

# --- pure formulas ------------------------------------------------------------------------------------------


def floor_ms(weight_bytes_per_step: float, bandwidth_bytes_per_s: float) -> float:
    """The single-stream bandwidth floor of a decode step, ms: weight bytes read per step ÷ bandwidth × 1000
    (the KV read at ≤ 768 tokens of context is left out, as in the plan's table)."""
    return theory.decode_step_floor_s(weight_bytes_per_step, 0.0, bandwidth_bytes_per_s) * 1000.0


def bw_eff_tb_per_s(slope_ms_per_gb: float) -> float:
    """The effective bandwidth of a fit ITL [ms] = a + slope × bytes [GB], TB/s = 1 ÷ slope (GB/ms)."""
    return 1.0 / slope_ms_per_gb


def crossover_gb(intercept_ms: float, slope_ms_per_gb: float) -> float:
    """The bytes per step where streaming takes as long as the fixed cost, GB: bytes ÷ bw_eff = a, i.e.
    a ÷ slope."""
    return intercept_ms / slope_ms_per_gb


@dataclass(frozen=True)
class FitBox:
    """A least-squares line on the sizes' means, and each parameter's range over the corners of the spread
    box."""

    fit: fits.LinearFit
    intercept: tuple[float, float]
    slope: tuple[float, float]
    r2: tuple[float, float]


def fit_box(xs: Sequence[float], ys: Sequence[float], spreads: Sequence[float]) -> FitBox:
    """``fits.least_squares`` on (x, y), and its intercept, slope and r² over the 2^n fits with each y moved
    to y − s or y + s (s its spread): the parameters' intervals under the repeat spread."""
    f = fits.least_squares(xs, ys)
    corners = [
        fits.least_squares(xs, [y + sign * s for y, s, sign in zip(ys, spreads, signs, strict=True)])
        for signs in itertools.product((-1.0, 1.0), repeat=len(ys))
    ]

    def rng(vals: list[float]) -> tuple[float, float]:
        return min(vals), max(vals)

    return FitBox(
        fit=f,
        intercept=rng([c.intercept for c in corners]),
        slope=rng([c.slope for c in corners]),
        r2=rng([c.r2 for c in corners]),
    )


def interval_verdict(lo_m: float, hi_m: float, t: Target) -> str:
    """``experiments.verdict`` for a bound on the measured interval [lo_m, hi_m] (centre ± half-width)."""
    return verdict("bound", (lo_m + hi_m) / 2.0, (hi_m - lo_m) / 2.0, t.lo, t.hi)


# --- the runs -----------------------------------------------------------------------------------------------


@dataclass
class SizeArm:
    """One size in one format: its runs by repeat, their point and theory."""

    arm: Arm
    runs: dict[int, RunData] = field(default_factory=dict)
    points: dict[int, BenchPoint] = field(default_factory=dict)
    cfg: ModelConfig | None = None
    cfg_source: str = ""
    bytes_per_step: float | None = None
    bandwidth: float | None = None
    bandwidth_source: str = ""
    plan_ok: dict[int, bool] = field(default_factory=dict)
    spread: float | None = None
    borrowed: bool = False
    # the plan's table row for this arm: (words on the row, predicted p50 ITL ms)
    predicted: tuple[str, float] | None = None

    @property
    def run(self) -> str:
        return self.arm.run

    @property
    def predicted_itl_ms(self) -> float | None:
        return self.predicted[1] if self.predicted else None

    def table_cite(self, run: RunData) -> str:
        """The run's plan.toml copy at the row predicting this arm's ITL."""
        return run.cite("plan.toml", quote_line(run, self.predicted[0]) if self.predicted else None)

    @property
    def size(self) -> str:
        return self.arm.variant

    @property
    def tag(self) -> str:
        return self.arm.series or ""

    @property
    def first(self) -> RunData:
        return self.runs[min(self.runs)]

    @property
    def weight_format(self) -> str:
        return self.arm.weight_format

    @property
    def itls(self) -> list[float]:
        vs = [point_metrics(self.points[k])["p50_itl_ms"] for k in sorted(self.points)]
        return [v for v in vs if v is not None]

    @property
    def itl_ms(self) -> float | None:
        return mean(self.itls) if self.itls else None

    @property
    def own_spread(self) -> float | None:
        return repeat_spread(self.itls) if self.itls else None

    @property
    def floor_ms(self) -> float | None:
        if self.bytes_per_step is None or self.bandwidth is None:
            return None
        return floor_ms(self.bytes_per_step, self.bandwidth)

    @property
    def layers(self) -> int | None:
        return self.cfg.num_hidden_layers if self.cfg else None

    def cites(self) -> list[str]:
        return [p.cite() for _, p in sorted(self.points.items())]


def _plan_states_arm(run: RunData, arm: Arm) -> bool:
    """The run's plan.toml copy states the arm's model config and weight format."""
    plan = run.docs.plan
    if plan is None or plan.model.config != arm.value:
        return False
    try:
        return theory.normalise_weight_format(plan.model.weight_format) == arm.weight_format
    except AnatomyError:
        return False


def _size_arm(campaign: Campaign, th: TheoryCtx, arm: Arm) -> SizeArm | None:
    """One arm's runs (the repeat rule), their concurrency-1 point, the theory of its plan's model config and
    the lease's copy bandwidth; None without runs."""
    a = SizeArm(arm)
    for run in campaign.all_runs:
        k = repeat_of(run.name, arm.run)
        if k is None:
            continue
        pts = [p for p in run.points if not p.warmup and p.concurrency == 1]
        a.plan_ok[k] = _plan_states_arm(run, arm)
        a.runs[k] = run
        if pts:
            a.points[k] = pts[0]
    if not a.runs:
        return None
    first = a.first
    plan = first.docs.plan
    if plan is not None:
        try:
            a.cfg = load_model_config(plan.model.config)
            a.cfg_source = first.cite("plan.toml", "model.config")
        except AnatomyError:
            a.cfg = None
    if a.cfg is not None:
        a.bytes_per_step = theory.weight_bytes_read_per_decode_step(a.cfg, arm.weight_format)
    ceil: Any = first.docs.ceilings or th.ceilings  # analysis.loading.rundocs.Ceilings
    if ceil is not None:
        a.bandwidth = float(ceil.copy_bytes_per_s)
        a.bandwidth_source = (
            first.cite(first.docs.files["ceilings"])
            if first.docs.ceilings is not None
            else (th.ceilings_source[0] if th.ceilings_source else "")
        )
    return a


def _arms(campaign: Campaign, th: TheoryCtx, spec: SizeSpec) -> dict[tuple[str, str], SizeArm]:
    out: dict[tuple[str, str], SizeArm] = {}
    for size in spec.sizes:
        for tag in spec.formats:
            arm = spec.arm(size, tag)
            a = _size_arm(campaign, th, arm) if arm is not None else None
            if a is not None:
                a.predicted = spec.predicted_itl.get(a.run)
                out[(size, tag)] = a
    # the spread rule: own repeats, else the largest relative spread of the repeated arms
    rel = [spread_pct(a.own_spread, a.itl_ms) for a in out.values() if a.own_spread is not None and a.itl_ms]
    for a in out.values():
        if a.own_spread is not None:
            a.spread, a.borrowed = a.own_spread, False
        elif rel and a.itl_ms is not None:
            a.spread, a.borrowed = max(rel) / 100.0 * a.itl_ms, True
    return out


@dataclass
class FormatFit:
    tag: str
    arms: list[SizeArm]
    box: FitBox
    plane: fits.PlaneFit | None

    @property
    def weight_format(self) -> str:
        return self.arms[0].weight_format

    def residual(self, a: SizeArm) -> float:
        assert a.itl_ms is not None and a.bytes_per_step is not None
        return a.itl_ms - self.box.fit.predict(a.bytes_per_step / GB)


def _format_fit(arms: dict[tuple[str, str], SizeArm], tag: str) -> FormatFit | None:
    pts = [
        a
        for (_size, t), a in arms.items()
        if t == tag and a.itl_ms is not None and a.bytes_per_step is not None and a.spread is not None
    ]
    if len(pts) < 3:
        return None
    xs = [float(a.bytes_per_step or 0.0) / GB for a in pts]
    ys = [float(a.itl_ms or 0.0) for a in pts]
    box = fit_box(xs, ys, [float(a.spread or 0.0) for a in pts])
    try:
        plane = fits.least_squares_plane([float(a.layers or 0) for a in pts], xs, ys)
    except ValueError:
        plane = None
    return FormatFit(tag, pts, box, plane)


# --- tables -------------------------------------------------------------------------------------------------


def _run_rows(arms: dict[tuple[str, str], SizeArm]) -> list[dict[str, Any]]:
    rows = []
    for (size, _tag), a in arms.items():
        predicted = a.predicted_itl_ms
        for k, run in sorted(a.runs.items()):
            p = a.points.get(k)
            itl = point_metrics(p)["p50_itl_ms"] if p is not None else None
            fl = a.floor_ms
            rows.append(
                {
                    "experiment": NAME,
                    "arm": a.run,
                    "run": run.name,
                    "repeat": k,
                    "size": size,
                    "weight_format": a.weight_format,
                    "model_config": a.arm.value,
                    "layers": a.layers,
                    "params": theory.params_total(a.cfg) if a.cfg else None,
                    "tied_head": a.cfg.tie_word_embeddings if a.cfg else None,
                    "weight_bytes_per_step": a.bytes_per_step,
                    "weight_gb_per_step": a.bytes_per_step / GB if a.bytes_per_step else None,
                    "bandwidth_tb_per_s": a.bandwidth / 1e12 if a.bandwidth else None,
                    "floor_ms": fl,
                    "p50_itl_ms": itl,
                    "achievement_pct": achievement_pct(fl, itl) if fl and itl else None,
                    "predicted_itl_ms": predicted,
                    "itl_minus_predicted_ms": (
                        difference(itl, predicted) if itl is not None and predicted is not None else None
                    ),
                    "plan_ok": a.plan_ok.get(k),
                    "source": p.cite() if p is not None else run.cite("requests.jsonl"),
                    "plan_source": a.table_cite(run),
                }
            )
    return rows


def _size_rows(arms: dict[tuple[str, str], SizeArm], ffits: dict[str, FormatFit]) -> list[dict[str, Any]]:
    """Per format and size: the mean, its spread, the achievement and its interval, the fit and residual, and
    the step from the next smaller size with the larger of the two spreads beside it."""
    rows = []
    for tag in dict.fromkeys(t for _s, t in arms):
        prev: SizeArm | None = None
        ff = ffits.get(tag)
        for (size, t), a in arms.items():
            if t != tag or a.itl_ms is None:
                continue
            fl, m, s = a.floor_ms, a.itl_ms, a.spread
            fit_ms = ff.box.fit.predict(a.bytes_per_step / GB) if ff and a.bytes_per_step else None
            res = m - fit_ms if fit_ms is not None else None
            step = difference(m, prev.itl_ms) if prev is not None and prev.itl_ms is not None else None
            step_s = (
                max(x for x in (s, prev.spread if prev else None, 0.0) if x is not None) if step else None
            )
            rows.append(
                {
                    "experiment": NAME,
                    "arm": a.run,
                    # every size is measured by its single-stream point of a concurrency phase
                    "test_kind": PHASE_TEST_KIND["concurrency"],
                    "size": size,
                    "weight_format": a.weight_format,
                    "layers": a.layers,
                    "params": theory.params_total(a.cfg) if a.cfg else None,
                    "weight_gb_per_step": a.bytes_per_step / GB if a.bytes_per_step else None,
                    "floor_ms": fl,
                    "runs": len(a.points),
                    "p50_itl_ms": m,
                    "spread_ms": s,
                    "spread_pct": spread_pct(s, m) if s is not None else None,
                    "spread_borrowed": a.borrowed,
                    "achievement_pct": achievement_pct(fl, m) if fl else None,
                    "achievement_lo_pct": achievement_pct(fl, m + s) if fl and s is not None else None,
                    "achievement_hi_pct": achievement_pct(fl, m - s) if fl and s is not None else None,
                    "predicted_itl_ms": a.predicted_itl_ms,
                    "itl_minus_predicted_ms": (
                        difference(m, a.predicted_itl_ms) if a.predicted_itl_ms is not None else None
                    ),
                    "fit_itl_ms": fit_ms,
                    "residual_ms": res,
                    "residual_distinguishable": distinguishable(res, s) if res is not None else None,
                    "step_from_smaller_ms": step,
                    "step_spread_ms": step_s,
                    "step_distinguishable": distinguishable(step, step_s) if step is not None else None,
                    "source": "; ".join(a.cites()),
                }
            )
            prev = a
    return rows


def _fit_rows(ffits: dict[str, FormatFit]) -> list[dict[str, Any]]:
    rows = []
    for ff in ffits.values():
        f, b = ff.box.fit, ff.box
        pl = ff.plane
        cross = crossover_gb(f.intercept, f.slope)
        below = [a.size for a in ff.arms if a.bytes_per_step is not None and a.bytes_per_step / GB < cross]
        above = [a.size for a in ff.arms if a.bytes_per_step is not None and a.bytes_per_step / GB >= cross]
        rows.append(
            {
                "experiment": NAME,
                "weight_format": ff.weight_format,
                "n": f.n,
                "intercept_ms": f.intercept,
                "intercept_lo_ms": b.intercept[0],
                "intercept_hi_ms": b.intercept[1],
                "slope_ms_per_gb": f.slope,
                "bw_eff_tb_per_s": bw_eff_tb_per_s(f.slope),
                "bw_eff_lo_tb_per_s": bw_eff_tb_per_s(b.slope[1]),
                "bw_eff_hi_tb_per_s": bw_eff_tb_per_s(b.slope[0]),
                "r2": f.r2,
                "r2_lo": b.r2[0],
                "r2_hi": b.r2[1],
                "crossover_gb": cross,
                "crossover_between": f"{below[-1] if below else '-'} / {above[0] if above else '-'}",
                "layer_fit_intercept_ms": pl.intercept if pl else None,
                "layer_fit_ms_per_layer": pl.b1 if pl else None,
                "layer_fit_bw_eff_tb_per_s": bw_eff_tb_per_s(pl.b2) if pl and pl.b2 > 0 else None,
                "layer_fit_r2": pl.r2 if pl else None,
            }
        )
    return rows


def _of_plans(run: RunData, plans: Sequence[str]) -> bool:
    """The run was started from one of the plans, or from a repeat's copy of one (``<plan>-r<k>``)."""
    name = plan_name(run)
    return name is not None and any(repeat_of(name, p) is not None for p in plans)


def _context_rows(
    campaign: Campaign, arms: dict[tuple[str, str], SizeArm], spec: SizeSpec
) -> list[dict[str, Any]]:
    """The 7B runs at concurrency 1 over the campaign's leases: the earlier runs (the plans the arms name as
    ``context``, and their repeats) beside this lease's arms that name them."""
    rows = []
    for run in campaign.all_runs:
        if not _of_plans(run, spec.context):
            continue
        plan = run.docs.plan
        if plan is None:
            continue
        try:
            fmt = theory.normalise_weight_format(plan.model.weight_format)
        except AnatomyError:
            continue
        for p in run.points:
            if p.warmup or p.concurrency != 1 or p.test_kind != "concurrency_sweep":
                continue
            rows.append(_context_row(run.name, fmt, p, "earlier"))
    for a in arms.values():
        if not a.arm.context:
            continue
        for k in sorted(a.points):
            rows.append(_context_row(a.runs[k].name, a.weight_format, a.points[k], "this"))
    return rows


def _context_row(run: str, fmt: str, p: BenchPoint, lease: str) -> dict[str, Any]:
    return {
        "experiment": NAME,
        "run": run,
        "lease": lease,
        "weight_format": fmt,
        "input_len_tokens": int(round(p.input_len_tokens or 0)),
        "output_len_tokens": p.requested_output_len_tokens,
        "p50_itl_ms": point_metrics(p)["p50_itl_ms"],
        "source": p.cite(),
    }


# --- predictions ------------------------------------------------------------------------------------------


def _measure(
    pred: Prediction, arms: dict[tuple[str, str], SizeArm], ffits: dict[str, FormatFit]
) -> list[tuple[str | None, float, float, float]]:
    """The prediction's measured value(s): (size or None, value, interval lo, interval hi) per target."""
    if pred.quantity == "achievement_pct":
        a = next((x for x in arms.values() if x.run == pred.arm), None)
        if a is None or a.itl_ms is None or a.floor_ms is None or a.spread is None:
            return []
        m, s, fl = a.itl_ms, a.spread, a.floor_ms
        return [(a.size, achievement_pct(fl, m), achievement_pct(fl, m + s), achievement_pct(fl, m - s))]
    ff = ffits.get(pred.arm)
    if ff is None:
        return []
    b = ff.box
    if pred.quantity == "fit_r2":
        return [(None, b.fit.r2, *b.r2)]
    if pred.quantity == "fit_intercept_ms":
        return [(None, b.fit.intercept, *b.intercept)]
    if pred.quantity == "fit_bw_eff_tb_per_s":
        return [
            (None, bw_eff_tb_per_s(b.fit.slope), bw_eff_tb_per_s(b.slope[1]), bw_eff_tb_per_s(b.slope[0]))
        ]
    if pred.quantity.startswith("q4_minus_f16"):
        base = ffits.get(pred.versus or "")
        if base is None:
            return []
        attr = "intercept" if pred.quantity.endswith("_intercept_ms") else "slope"
        t, v = getattr(b, attr), getattr(base.box, attr)
        m = getattr(b.fit, attr) - getattr(base.box.fit, attr)
        # the difference's interval: the two intervals' ends against each other
        return [(None, m, t[0] - v[1], t[1] - v[0])]
    if pred.quantity == "fit_residual_ms":
        return _residuals(pred, ff)
    raise ValueError(f"unknown model-size quantity {pred.quantity!r}")


def _residuals(pred: Prediction, ff: FormatFit) -> list[tuple[str | None, float, float, float]]:
    """The fit's residual at each size a target names (its ``variant``), with the size's spread."""
    out: list[tuple[str | None, float, float, float]] = []
    for size in (t.variant for t in pred.targets):
        a = next((x for x in ff.arms if x.size == size), None)
        if a is None or a.spread is None:
            continue
        r = ff.residual(a)
        out.append((size, r, r - a.spread, r + a.spread))
    return out


def _evaluate(
    pred: Prediction, arms: dict[tuple[str, str], SizeArm], ffits: dict[str, FormatFit]
) -> list[dict[str, Any]]:
    rows = []
    measured = _measure(pred, arms, ffits)
    targets = list(pred.targets)
    sizes = [t.variant for t in targets]
    for size_m, m, lo_m, hi_m in measured:
        t = targets[sizes.index(size_m)] if size_m in sizes else targets[0]
        rows.append(
            {
                "experiment": NAME,
                "prediction": pred.name,
                "arm": pred.arm,
                "versus": pred.versus,
                "quantity": pred.quantity,
                "size": size_m,
                "predicted_lo": None if t.lo == -INF else t.lo,
                "predicted_hi": None if t.hi == INF else t.hi,
                "measured": m,
                "interval_lo": lo_m,
                "interval_hi": hi_m,
                "verdict": interval_verdict(lo_m, hi_m, t),
            }
        )
    return rows


def _prediction_finding(
    pred: Prediction,
    rows: list[dict[str, Any]],
    arms: dict[tuple[str, str], SizeArm],
    ffits: dict[str, FormatFit],
    campaign: Campaign,
    formats: dict[str, str],
) -> fnd.Finding:
    plan_src = plan_cite(campaign, pred.plan)
    if pred.quantity == "achievement_pct":
        a = next(x for x in arms.values() if x.run == pred.arm)
        at = run_at(a.first, a.weight_format, topic=TOPIC)
        srcs = [plan_src, *a.cites(), a.cfg_source, a.bandwidth_source]
    else:
        at = _format_at(formats[pred.arm])
        srcs = [plan_src]
        for tag in (pred.arm, pred.versus):
            if tag in ffits:
                srcs += [c for a in ffits[tag].arms for c in a.cites()]
    v = combine([r["verdict"] for r in rows])
    d = next((r for r in rows if r["verdict"] == "refuted"), None) or next(
        (r for r in rows if r["verdict"] == "inconclusive"), rows[0]
    )
    half = (d["interval_hi"] - d["interval_lo"]) / 2.0
    return fnd.Finding(
        at=at(pred.name),
        value=d["measured"],
        unit=QUANTITY_UNITS[pred.quantity],
        sources=tuple(dict.fromkeys(s for s in srcs if s)),
        status="mismatch" if v == "refuted" else "ok",
        detail=f"plan: {pred.stated}",
        extra={
            "verdict": v,
            "experiment": NAME,
            "quantity": pred.quantity,
            "kind": "bound",
            "size": d["size"],
            "baseline_format": formats[pred.versus] if pred.versus else None,
            "predicted_lo": d["predicted_lo"],
            "predicted_hi": d["predicted_hi"],
            "predicted_value": None,
            "spread": half,
            "spread_borrowed": False,
            "interval_lo": d["interval_lo"],
            "interval_hi": d["interval_hi"],
            "points": [
                {k: r[k] for k in ("size", "measured", "interval_lo", "interval_hi", "verdict")} for r in rows
            ],
            "plan_source": plan_src,
        },
    )


# --- other findings -----------------------------------------------------------------------------------------


def _plan_check(arms: dict[tuple[str, str], SizeArm], item: str) -> fnd.Finding:
    """Every arm's runs state the arm's model config and weight format in their plan.toml; ``definitions``:
    where the arms' [[experiment]] entries were read."""
    bad = {a.runs[k].name: a.arm.value for a in arms.values() for k, ok in a.plan_ok.items() if not ok}
    runs = [r for a in arms.values() for r in a.runs.values()]
    return fnd.checked(
        At(topic=TOPIC)("arms_match_plans"),
        not bad,
        [r.cite("plan.toml", "model.config") for r in runs],
        detail="each arm's plan.toml states the arm's model.config and model.weight_format",
        mismatched=bad,
        runs=sorted(r.name for r in runs),
        arms=len(arms),
        item=item,
        definitions=sorted({a.arm.source for a in arms.values()}),
    )


def _arm_findings(arms: dict[tuple[str, str], SizeArm]) -> list[fnd.Finding]:
    """Per size and format: achievement (floor ÷ mean p50 ITL) with its interval, and the mean p50 ITL beside
    the plan's predicted ITL."""
    out: list[fnd.Finding] = []
    for (size, _tag), a in arms.items():
        m, fl, s = a.itl_ms, a.floor_ms, a.spread
        at = run_at(a.first, a.weight_format, topic=TOPIC)
        predicted = a.predicted_itl_ms
        if m is None or fl is None:
            out.append(
                fnd.not_available(
                    at("achievement_pct"),
                    "%",
                    "exp_runs_missing",
                    f"{a.run}: no concurrency-1 point, or no model config / measured bandwidth for its floor",
                )
            )
            continue
        common: dict[str, Any] = {
            "size": size,
            "layers": a.layers,
            "weight_bytes_per_step": a.bytes_per_step,
            "floor_ms": fl,
            "p50_itl_ms": m,
            "spread_ms": s,
            "spread_borrowed": a.borrowed,
            "repeats": len(a.points),
        }
        srcs = [*a.cites(), a.cfg_source, a.bandwidth_source]
        out.append(
            fnd.measured(
                at("achievement_pct"),
                achievement_pct(fl, m),
                "%",
                srcs,
                detail="floor (weight bytes per step of the plan's model.config / the lease's copy "
                "bandwidth) / mean p50 ITL at concurrency 1",
                achievement_lo_pct=achievement_pct(fl, m + s) if s is not None else None,
                achievement_hi_pct=achievement_pct(fl, m - s) if s is not None else None,
                **common,
            )
        )
        out.append(
            fnd.measured(
                at("p50_itl_ms"),
                m,
                "ms",
                [*a.cites(), a.table_cite(a.first)],
                detail="mean p50 ITL at concurrency 1 over the arm's runs, beside the plan's predicted ITL",
                predicted_itl_ms=predicted,
                itl_minus_predicted_ms=difference(m, predicted) if predicted is not None else None,
                **{k: v for k, v in common.items() if k != "p50_itl_ms"},
            )
        )
    return out


def _fit_findings(ffits: dict[str, FormatFit]) -> list[fnd.Finding]:
    out: list[fnd.Finding] = []
    for ff in ffits.values():
        at = _format_at(ff.weight_format)
        f, b = ff.box.fit, ff.box
        srcs = [c for a in ff.arms for c in a.cites()]
        sizes = [a.size for a in ff.arms]
        out.append(
            fnd.measured(
                at("fit_intercept_ms"),
                f.intercept,
                "ms",
                srcs,
                detail=(
                    "least squares ITL = a + bytes / bw_eff over the sizes' mean p50 ITL (analysis.core.fits)"
                ),
                interval_lo=b.intercept[0],
                interval_hi=b.intercept[1],
                r2=f.r2,
                n=f.n,
                sizes=sizes,
            )
        )
        out.append(
            fnd.measured(
                at("fit_bw_eff_tb_per_s"),
                bw_eff_tb_per_s(f.slope),
                "TB/s",
                srcs,
                detail="1 / the fit's slope (GB/ms = TB/s)",
                interval_lo=bw_eff_tb_per_s(b.slope[1]),
                interval_hi=bw_eff_tb_per_s(b.slope[0]),
                slope_ms_per_gb=f.slope,
            )
        )
        cross = crossover_gb(f.intercept, f.slope)
        out.append(
            fnd.measured(
                at("crossover_gb"),
                cross,
                "GB",
                srcs,
                detail="bytes per step where bytes / bw_eff = a: above it, streaming the weights dominates",
                below=[a.size for a in ff.arms if (a.bytes_per_step or 0) / GB < cross],
                above=[a.size for a in ff.arms if (a.bytes_per_step or 0) / GB >= cross],
            )
        )
        if ff.plane is not None:
            pl = ff.plane
            out.append(
                fnd.measured(
                    at("layer_fit_ms_per_layer"),
                    pl.b1,
                    "ms",
                    srcs,
                    detail="least squares ITL = a0 + a_layer x layers + bytes / bw_eff "
                    "(fits.least_squares_plane); 5 points, 3 parameters: 2 degrees of freedom",
                    intercept_ms=pl.intercept,
                    bw_eff_tb_per_s=bw_eff_tb_per_s(pl.b2) if pl.b2 > 0 else None,
                    r2=pl.r2,
                    r2_without_layers=f.r2,
                    layers=[a.layers for a in ff.arms],
                    residuals_ms=[ff.residual(a) for a in ff.arms],
                )
            )
    return out


def _context_finding(rows: list[dict[str, Any]], fmt: str) -> fnd.Finding | None:
    vals = [r["p50_itl_ms"] for r in rows if r["weight_format"] == fmt and r["p50_itl_ms"] is not None]
    if len(vals) < 2:
        return None
    m = mean(vals)
    return fnd.measured(
        _format_at(fmt)("cross_lease_7b_spread_pct"),
        spread_pct(repeat_spread(vals) or 0.0, m),
        "%",
        [r["source"] for r in rows if r["weight_format"] == fmt],
        detail="7B at concurrency 1: (max - min) / mean of p50 ITL over this lease's and the earlier "
        "leases' runs (earlier runs: 1,024 in, this lease: 512 in)",
        runs=len(vals),
        min_ms=min(vals),
        max_ms=max(vals),
    )


# --- the section --------------------------------------------------------------------------------------------


def _not_run(spec: SizeSpec) -> Section:
    arms = ", ".join([a.run for a in spec.exp.arms] + list(spec.exp.missing))
    return Section(
        name=NAME,
        findings=[
            fnd.not_available(
                At(topic=TOPIC)("arms_match_plans"),
                "bool",
                "exp_runs_missing",
                f"experiment model_size: fewer than two of its arms ({arms}) have runs",
            )
        ],
    )


def run(s: SectionInput) -> Section:
    campaign, th = s.campaign, s.th
    spec = size_spec(campaign)
    if spec is None:
        return Section(name=NAME)
    arms = _arms(campaign, th, spec)
    if len(arms) < 2:
        return _not_run(spec)
    ffits = {tag: ff for tag in spec.formats if (ff := _format_fit(arms, tag)) is not None}
    out: list[fnd.Finding] = [_plan_check(arms, spec.exp.item), *_arm_findings(arms), *_fit_findings(ffits)]
    pred_rows: list[dict[str, Any]] = []
    for pred in spec.predictions:
        rows = _evaluate(pred, arms, ffits)
        if rows:
            pred_rows += rows
            out.append(_prediction_finding(pred, rows, arms, ffits, campaign, spec.formats))
    context = _context_rows(campaign, arms, spec)
    for fmt in spec.formats.values():
        f = _context_finding(context, fmt)
        if f is not None:
            out.append(f)
    tables = {
        "model_size_runs": _run_rows(arms),
        "model_size_sizes": _size_rows(arms, ffits),
        "model_size_fits": _fit_rows(ffits),
        "model_size_predictions": pred_rows,
        "model_size_context": context,
    }
    return Section(name=NAME, tables={k: pd.DataFrame(v) for k, v in tables.items() if v}, findings=out)
