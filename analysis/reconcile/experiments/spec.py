"""The experiments as the plans define them (issue #21: experiments are data, not code).

Each arm's plan holds an ``[[experiment]]`` entry (``collector.raw.plan.ExperimentPlan``): the experiment's
question, knob and arms (every arm's plan, by name, in order), this arm's variant and knob value, its baseline
(``versus``), and the predictions stated in this plan. Where it is read: a run's sealed plan copy when the
copy holds the entry (runs planned with it); else the repository's plan file the run was started from
(``run.json`` meta ``plan_file``, relative to the folder holding the raw store), for the runs sealed before
the plans carried the table — their predictions were written as the copy's header prose before the run, and
each prediction's ``quote`` finds that header line in the copy, which is what a finding cites.

The rule that ties runs to arms: an arm IS a run name (its plan's ``run``). A run belongs to an arm when its
name is the arm's run name, or that name plus a repeat suffix ``-r<k>`` (the H200 plans) or ``-<k>`` (what
``collector run`` appends when the name exists), k ≥ 2 being the k-th repeat.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.core import theory
from analysis.loading.campaign import Campaign, RunData
from analysis.reconcile.experiments.formulas import INF
from collector.raw.errors import PlanError
from collector.raw.plan import ExperimentPlan, Plan, PredictionPlan, TargetPlan, load_plan

_REPEAT = re.compile(r"^(?P<base>.+)-r?(?P<k>\d+)$")
# what every arm's entry of one experiment must state alike
SHARED_KEYS = ("item", "question", "hypothesis", "knob", "arms")


def repeat_of(run_name: str, arm_run: str) -> int | None:
    """The repeat number of ``run_name`` as a run of the arm ``arm_run``: 1 for the name itself, k for
    ``<arm_run>-r<k>`` or ``<arm_run>-<k>`` (k ≥ 2); None when the run is not of this arm."""
    if run_name == arm_run:
        return 1
    m = _REPEAT.match(run_name)
    if m and m["base"] == arm_run and int(m["k"]) >= 2:
        return int(m["k"])
    return None


@dataclass(frozen=True)
class Knob:
    """The one setting an experiment varies, as a run's plan.toml states it: a server flag's value (``arg``),
    a flag's presence (``flag``: "on"/"off"), an environment variable of the server (``env``: "unset" when
    absent) or a ``[model]`` key (``model``)."""

    kind: str  # collector.raw.plan.KNOB_KINDS
    name: str
    default: str | None = None  # an arg the plan may leave out (llama.cpp's default KV type is f16)

    def value(self, plan: Plan) -> str | None:
        args = list(plan.server.args)
        if self.kind == "arg":
            if self.name in args and args.index(self.name) + 1 < len(args):
                return args[args.index(self.name) + 1]
            return self.default
        if self.kind == "flag":
            return "on" if self.name in args else "off"
        if self.kind == "env":
            return plan.server.env.get(self.name, "unset")
        if self.kind == "model":
            return str(getattr(plan.model, self.name))
        raise ValueError(f"unknown knob kind {self.kind!r}")


@dataclass(frozen=True)
class Arm:
    variant: str  # what the knob is set to, as a label key (labels_zh.EXPERIMENT_VARIANTS)
    run: str  # the arm's run name (without a repeat suffix): its plan's ``run``
    value: str  # the knob's value its plan must state
    weight_format: str
    plan: str = ""  # the arm's plan, by name
    series: str | None = None  # the arms a fit groups (experiment 4: the weight format's run-name tag)
    quote: str | None = None  # words on the plan line stating this arm's expectation
    params: dict[str, float] = field(default_factory=dict)
    context: tuple[str, ...] = ()  # plans of earlier runs shown beside this arm
    # where the arm's definition was read: its run's plan copy (cited), or the repository's plan file the
    # run was started from, for runs sealed before their plan carried the [[experiment]] table
    source: str = ""


@dataclass(frozen=True)
class Target:
    """Where a prediction is tested and what it says there: a point (concurrency, input length, an arm's
    variant; None = every point of the arm) and a bound [lo, hi] or a point value. ``value`` None with kind
    ``ledger``: computed from the byte ledger; ``stated`` then is the number the plan wrote."""

    concurrency: int | None = None
    input_len: int | None = None
    lo: float = -INF
    hi: float = INF
    value: float | None = None
    variant: str | None = None
    stated: float | None = None


@dataclass(frozen=True)
class Prediction:
    name: str  # the finding's metric
    experiment: str
    arm: str  # the run of the arm the quantity belongs to (the treatment of a difference), or a series
    versus: str | None  # the baseline arm (or series) of a difference
    quantity: str  # p50_itl_ms | p50_itl_delta_ms | p50_itl_delta_pct | output_throughput_tokens_per_s | …
    kind: str  # "bound" | "point" | "ledger" (a point value from analysis.core.theory)
    targets: tuple[Target, ...]
    plan: tuple[str, str]  # (run, words on the line of its plan.toml copy that states it)
    stated: str  # the plan's words (as written, English)


@dataclass(frozen=True)
class Experiment:
    name: str  # the finding topic is exp_<name>
    item: str  # issue #15's item ("1", "1b" …)
    question: str
    hypothesis: str
    knob: Knob
    arms: tuple[Arm, ...]  # the arms with runs in this campaign, in the plans' order
    pairs: tuple[tuple[str, str], ...]  # (treatment arm run, baseline arm run): the differences it is about
    predictions: tuple[Prediction, ...] = ()
    missing: tuple[str, ...] = ()  # arms (by plan) without a run in this campaign

    @property
    def topic(self) -> str:
        return f"exp_{self.name}"

    def arm(self, run: str) -> Arm:
        return next(a for a in self.arms if a.run == run)


# --- where a run's definition is read ---------------------------------------------------------------------


def plan_name(run: RunData) -> str | None:
    """The name of the plan a run was started from (``run.json`` meta ``plan_file``'s stem); None for runs
    our collector did not plan (imported results)."""
    plan_file = (run.info.meta or {}).get("plan_file")
    return Path(str(plan_file)).stem if plan_file else None


@dataclass(frozen=True)
class PlanDef:
    name: str  # the plan's name
    plan: Plan  # whose [[experiment]] entries count
    source: str  # where they were read: the run's plan copy (its citation) or the plans/ file


def _plan_def(run: RunData) -> PlanDef | None:
    name = plan_name(run)
    copy = run.docs.plan
    if name is None:
        return None
    if copy is not None and copy.experiments:
        return PlanDef(name, copy, run.cite("plan.toml"))
    plan_file = str(run.info.meta["plan_file"])
    # the plan's path is relative to where `collector run` started: the folder holding the raw store
    path = run.info.path.parents[2] / plan_file
    if not path.is_file():
        return None
    plan = load_plan(path)
    return PlanDef(name, plan, plan_file) if plan.experiments else None


def plan_definitions(campaign: Campaign) -> dict[str, PlanDef]:
    """The campaign's plans that define experiments, by name, in the campaign's run order."""
    out: dict[str, PlanDef] = {}
    for run in campaign.all_runs:
        name = plan_name(run)
        if name is not None and name not in out and (d := _plan_def(run)) is not None:
            out[name] = d
    return out


# --- the experiments --------------------------------------------------------------------------------------


def _shared(e: ExperimentPlan) -> dict[str, Any]:
    return {k: getattr(e, k) for k in SHARED_KEYS}


def _check_alike(name: str, entries: list[tuple[PlanDef, ExperimentPlan]]) -> None:
    """Every arm's entry of one experiment states its question, knob and arms alike: one line naming the
    two plans and the key otherwise."""
    first_def, first = entries[0]
    for d, e in entries[1:]:
        for key, v in _shared(e).items():
            if v != getattr(first, key):
                raise PlanError(
                    f"{d.source}: [[experiment]] {name!r}: {key} differs from {first_def.source}'s "
                    "(every arm's plan states the experiment alike)"
                )


def _arm(d: PlanDef, e: ExperimentPlan) -> Arm:
    return Arm(
        variant=e.variant,
        run=d.plan.run_name,
        value=e.value,
        weight_format=theory.normalise_weight_format(d.plan.model.weight_format),
        plan=d.name,
        series=e.series,
        quote=e.quote,
        params=dict(e.params),
        context=e.context,
        source=d.source,
    )


def _target(t: TargetPlan) -> Target:
    return Target(
        concurrency=t.concurrency,
        input_len=t.input_len,
        lo=-INF if t.lo is None else t.lo,
        hi=INF if t.hi is None else t.hi,
        value=t.value,
        variant=t.variant,
        stated=t.stated,
    )


def _prediction(name: str, holder: Arm, p: PredictionPlan, runs: dict[str, str]) -> Prediction:
    """A prediction with its arms as run names (a series stays a series), citing its holder's plan copy."""
    if p.series is not None:
        arm, versus = p.series, p.versus
    else:
        arm = runs.get(p.arm or holder.plan, p.arm or holder.plan)
        versus = runs.get(p.versus, p.versus) if p.versus else None
    return Prediction(
        name=p.name,
        experiment=name,
        arm=arm,
        versus=versus,
        quantity=p.quantity,
        kind=p.kind,
        targets=tuple(_target(t) for t in p.targets),
        plan=(holder.run, p.quote),
        stated=p.stated,
    )


def _experiment(name: str, entries: list[tuple[PlanDef, ExperimentPlan]]) -> Experiment:
    _check_alike(name, entries)
    first = entries[0][1]
    by_plan = {d.name: (d, e) for d, e in entries}
    arms = tuple(_arm(*by_plan[p]) for p in first.arms if p in by_plan)
    runs = {a.plan: a.run for a in arms}
    versus = {a.run: by_plan[a.plan][1].versus for a in arms}
    pairs = tuple((a.run, runs[v]) for a in arms if (v := versus[a.run]) is not None and v in runs)
    preds = tuple(_prediction(name, a, p, runs) for a in arms for p in by_plan[a.plan][1].predictions)
    return Experiment(
        name=name,
        item=first.item,
        question=first.question,
        hypothesis=first.hypothesis,
        knob=Knob(first.knob.kind, first.knob.name, first.knob.default),
        arms=arms,
        pairs=pairs,
        predictions=preds,
        missing=tuple(p for p in first.arms if p not in by_plan),
    )


def load_experiments(campaign: Campaign) -> list[Experiment]:
    """The experiments the campaign's runs are arms of, by issue item."""
    grouped: dict[str, list[tuple[PlanDef, ExperimentPlan]]] = {}
    for d in plan_definitions(campaign).values():
        for e in d.plan.experiments:
            grouped.setdefault(e.name, []).append((d, e))
    return sorted((_experiment(n, es) for n, es in grouped.items()), key=lambda x: x.item)


def quote_line(run: RunData, quote: str) -> int | None:
    """The first line of the run's plan.toml copy holding ``quote``; None without a copy or the words."""
    plan = run.docs.plan
    text = plan.raw_text if plan is not None else ""
    return next((i for i, line in enumerate(text.splitlines(), 1) if quote in line), None)


def plan_cite(campaign: Campaign, plan: tuple[str, str]) -> str:
    """The plan.toml line stating a prediction (``Prediction.plan``), cited in the run whose copy it is."""
    name, quote = plan
    run = next((r for r in campaign.all_runs if r.name == name), None)
    if run is None:
        return f"{name}/plan.toml"
    return run.cite("plan.toml", quote_line(run, quote))
