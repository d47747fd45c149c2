"""The ``[[experiment]]`` table of a plan (collector/raw/plan.py, issue #21: experiments are data): a shipped
arm's plan parses into its experiment, its predictions and their points; bad input is one line naming the
file and the key; analysis refuses two arms' plans that state one experiment differently."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.reconcile.experiments import spec
from collector.raw.errors import PlanError
from collector.raw.plan import load_plan, parse_plan

ROOT = Path(__file__).resolve().parents[1]
PLAN = ROOT / "plans" / "h200-exp-slots-np256-q4km.toml"
BASE = PLAN.read_text(encoding="utf-8").split("\n# The experiments this plan is an arm of")[0]
ENTRY = """
[[experiment]]
name = "slots"
item = "1"
question = "Q?"
hypothesis = "H."
knob = { kind = "arg", name = "-np" }
arms = ["a-np256", "a-np64"]
variant = "np64"
value = "64"
versus = "a-np256"

[[experiment.predict]]
name = "not_slower"
quantity = "p50_itl_delta_pct"
kind = "bound"
lo = -10.0
hi = 0.0
at = [{ concurrency = 1 }, { concurrency = 64, lo = -20.0 }]
quote = "np64 <= np256"
stated = "np64 <= np256"
"""


def test_a_shipped_arm_parses():
    """The np256 Q4_K_M plan is an arm of three experiments; its slot predictions carry their points."""
    p = load_plan(PLAN)
    assert [e.name for e in p.experiments] == ["slots", "sampling", "graphs"]
    slots = p.experiments[0]
    assert (slots.knob.kind, slots.knob.name, slots.value, slots.versus) == ("arg", "-np", "256", None)
    cells = slots.predictions[0]
    assert cells.kind == "point" and [t.concurrency for t in cells.targets] == [1, 4, 8, 16, 32, 64]
    assert {t.value for t in cells.targets} == {-15.7}
    assert cells.quote in p.raw_text.splitlines()[10]  # the header line that stated it, before the run


def test_points_inherit_the_bound():
    (e,) = parse_plan(BASE + ENTRY, Path("a.toml")).experiments
    (pred,) = e.predictions
    assert [(t.concurrency, t.lo, t.hi) for t in pred.targets] == [(1, -10.0, 0.0), (64, -20.0, 0.0)]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[[experiment]]\n", "[experiment]\n", 1), "a.toml: [[experiment]]: expected an array of tables"),
        (('kind = "arg"', 'kind = "args"'), "a.toml: [[experiment]] #1.knob.kind: must be one of arg, flag"),
        (('arms = ["a-np256", "a-np64"]', 'arms = ["a-np64"]'), "a.toml: [[experiment]] #1.arms: list every"),
        (
            ('versus = "a-np256"', 'versus = "a-np32"'),
            "a.toml: [[experiment]] #1.versus: 'a-np32' is not one",
        ),
        (("lo = -10.0\nhi = 0.0\n", ""), "a.toml: [[experiment]] #1.predict[0].at[0].lo: missing: a bound"),
        (('kind = "bound"', 'kind = "point"'), "a.toml: [[experiment]] #1.predict[0].at[0].value: missing"),
        (
            ('quote = "np64 <= np256"', 'qoute = "np64 <= np256"'),
            "a.toml: [[experiment]] #1.predict[0].quote:",
        ),
        (("hi = 0.0", "hi = -30.0"), "a.toml: [[experiment]] #1.predict[0].at[0].hi: a bound [lo, hi] needs"),
        (('item = "1"', "item = 1"), "a.toml: [[experiment]] #1.item: expected str, got int 1"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(edit, message):
    with pytest.raises(PlanError) as err:
        parse_plan(BASE + ENTRY.replace(*edit), Path("a.toml"))
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_arms_stating_the_experiment_differently_are_refused():
    a = parse_plan(BASE + ENTRY, Path("plans/a-np64.toml"))
    b = parse_plan(BASE + ENTRY.replace('question = "Q?"', 'question = "Other?"'), Path("plans/a-np256.toml"))
    defs = [(spec.PlanDef("a-np64", a, "plans/a-np64.toml"), a.experiments[0])]
    defs.append((spec.PlanDef("a-np256", b, "plans/a-np256.toml"), b.experiments[0]))
    with pytest.raises(PlanError, match=r"^plans/a-np256.toml: \[\[experiment\]\] 'slots': question differs"):
        spec._check_alike("slots", defs)
