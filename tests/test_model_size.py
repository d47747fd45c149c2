"""Issue #15 experiment 4, model size (analysis/reconcile/model_size.py), on the committed H200 runs: a tied
model's bytes per step counted here from its config.json; achievement and the per-format fit recomputed by
hand from requests.jsonl, the plan copies and the lease's ceilings.json; the plan lines the predictions cite;
the verdicts on the real runs by the interval rule; the plane fit on hand-checkable numbers."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from analysis.core import fits
from analysis.loading.campaign import load_campaign
from analysis.reconcile import Context, SectionInput, theoryctx
from analysis.reconcile import experiments as X
from analysis.reconcile import model_size as M
from analysis.reconcile.experiments import spec
from tests.by_hand import p50_itl_ms

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "raw"
H200_NAME = "h200-qwen2.5-7b-random"
H200 = RAW / H200_NAME
MODELS = REPO / "analysis" / "core" / "models"

pytestmark = pytest.mark.skipif(not H200.is_dir(), reason="the H200 campaign is not committed in raw/")


def _p50_itl_ms(run: str, concurrency: int) -> float:
    """The p50 inter-token interval at one sweep point of an H200 run, from its requests.jsonl by hand."""
    return p50_itl_ms(H200 / run, concurrency)


@pytest.fixture(scope="module")
def campaign():
    return load_campaign([RAW], H200_NAME)


@pytest.fixture(scope="module")
def size_spec(campaign):
    return M.size_spec(campaign)


@pytest.fixture(scope="module")
def section(campaign):
    return M.run(SectionInput(campaign, Context(campaign=campaign), theoryctx.build(campaign)))


def _table_row(campaign, size_spec, run: str) -> str:
    """The line of the run's plan copy that predicts its arm's ITL (the arm's table row)."""
    arm = run.rsplit("-r", 1)[0]
    r = next(x for x in campaign.all_runs if x.name == run)
    line = spec.quote_line(r, size_spec.predicted_itl[arm][0])
    return (H200 / run / "plan.toml").read_text().splitlines()[line - 1]


def _finding(section, metric: str, run: str | None = None, weight_format: str | None = None):
    hits = [
        f
        for f in section.findings
        if f.metric == metric and run in (None, f.run) and weight_format in (None, f.weight_format)
    ]
    assert len(hits) == 1, [f.key for f in hits]
    return hits[0]


def _config(run: str) -> dict:
    """The model config.json the run's plan.toml names (model.config)."""
    plan = (H200 / run / "plan.toml").read_text()
    name = re.search(r'(?m)^config = "([^"]+)"', plan)[1]
    return json.loads((MODELS / f"{name}.json").read_text())


def _f16_bytes_per_step(c: dict) -> float:
    """Weight bytes one decode step reads at 2 bytes per parameter, counted from config.json: per layer
    q (h×h + h bias), k and v (h×kv + kv bias each), o (h×h), gate/up/down (3 × h×i), two norms (2h);
    the final norm (h); the output head (vocab × h) — the embedding table itself when tied, read once."""
    h, i, L, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    per_layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * i + 2 * h
    return 2.0 * (L * per_layer + h + v * h)


def _floor_ms(run: str) -> float:
    bw = json.loads((H200 / run / "fingerprint" / "ceilings.json").read_text())["copy_bytes_per_s"]
    return _f16_bytes_per_step(_config(run)) / bw * 1000.0


def test_tied_model_bytes_by_hand(section, campaign, size_spec):
    """0.5B is tied: its embedding table is read once per step as the head; the run table and the plan's row
    agree with the count from config.json."""
    c = _config("exp-size-0.5b-f16")
    assert c["tie_word_embeddings"] is True
    want = _f16_bytes_per_step(c)
    row = next(
        r for r in section.tables["model_size_runs"].to_dict("records") if r["run"] == "exp-size-0.5b-f16"
    )
    assert row["weight_bytes_per_step"] == pytest.approx(want, rel=1e-12)
    assert row["tied_head"]
    assert f"{want / 1e9:.3f} GB/step" in _table_row(campaign, size_spec, "exp-size-0.5b-f16")
    # untied 14B: the same count with its own head
    c14 = _config("exp-size-14b-f16")
    assert c14["tie_word_embeddings"] is False
    row14 = next(
        r for r in section.tables["model_size_runs"].to_dict("records") if r["run"] == "exp-size-14b-f16"
    )
    assert row14["weight_bytes_per_step"] == pytest.approx(_f16_bytes_per_step(c14), rel=1e-12)


def test_achievement_by_hand(section):
    """0.5B F16 (two runs: mean, spread) and 14B F16 (one run: the borrowed spread is the 0.5B F16 or 7B
    Q4_K_M relative spread, whichever is larger), from requests.jsonl and ceilings.json."""
    a1, a2 = _p50_itl_ms("exp-size-0.5b-f16", 1), _p50_itl_ms("exp-size-0.5b-f16-r2", 1)
    small = (a1 + a2) / 2
    f = _finding(section, "achievement_pct", run="exp-size-0.5b-f16")
    assert f.value == pytest.approx(_floor_ms("exp-size-0.5b-f16") / small * 100.0, rel=1e-9)
    assert f.extra["spread_ms"] == pytest.approx(abs(a1 - a2), rel=1e-9)
    assert not f.extra["spread_borrowed"]

    q1, q2 = _p50_itl_ms("exp-size-7b-q4km", 1), _p50_itl_ms("exp-size-7b-q4km-r2", 1)
    rel = max(abs(a1 - a2) / small, abs(q1 - q2) / ((q1 + q2) / 2))
    big = _p50_itl_ms("exp-size-14b-f16", 1)
    g = _finding(section, "achievement_pct", run="exp-size-14b-f16")
    assert g.value == pytest.approx(_floor_ms("exp-size-14b-f16") / big * 100.0, rel=1e-9)
    assert g.extra["spread_borrowed"]
    assert g.extra["spread_ms"] == pytest.approx(rel * big, rel=1e-9)
    # the bigger model is nearer its floor
    assert g.value > f.value


def _f16_points() -> tuple[list[float], list[float], list[float]]:
    """F16's five sizes: GB per step (config.json), mean p50 ITL (requests.jsonl) and spread."""
    xs, ys, runs = [], [], {}
    for size in ("0.5b", "1.5b", "3b", "7b", "14b"):
        names = [p.name for p in H200.iterdir() if X.repeat_of(p.name, f"exp-size-{size}-f16") is not None]
        runs[size] = [_p50_itl_ms(n, 1) for n in names]
        xs.append(_f16_bytes_per_step(_config(f"exp-size-{size}-f16")) / 1e9)
        ys.append(sum(runs[size]) / len(runs[size]))
    q = [_p50_itl_ms("exp-size-7b-q4km", 1), _p50_itl_ms("exp-size-7b-q4km-r2", 1)]
    rel = max((max(v) - min(v)) / (sum(v) / len(v)) for v in [*(r for r in runs.values() if len(r) > 1), q])
    spreads = [(max(r) - min(r)) if len(r) > 1 else rel * y for r, y in zip(runs.values(), ys, strict=True)]
    return xs, ys, spreads


def _ols(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    r2 = 1 - sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True)) / sum((y - my) ** 2 for y in ys)
    return a, b, r2


def test_f16_fit_by_hand(section):
    """The F16 line through the five sizes' means, and its intercept interval over the spread box's
    corners."""
    xs, ys, spreads = _f16_points()
    a, b, r2 = _ols(xs, ys)
    fa = _finding(section, "fit_intercept_ms", weight_format="fp16")
    fb = _finding(section, "fit_bw_eff_tb_per_s", weight_format="fp16")
    assert fa.value == pytest.approx(a, rel=1e-9)
    assert fb.value == pytest.approx(1.0 / b, rel=1e-9)
    assert fa.extra["r2"] == pytest.approx(r2, rel=1e-9)
    corners = [
        _ols(xs, [y + s * k for y, s, k in zip(ys, spreads, ks, strict=True)])[0]
        for ks in itertools.product((-1, 1), repeat=len(ys))
    ]
    assert fa.extra["interval_lo"] == pytest.approx(min(corners), rel=1e-9)
    assert fa.extra["interval_hi"] == pytest.approx(max(corners), rel=1e-9)
    cross = _finding(section, "crossover_gb", weight_format="fp16")
    assert cross.value == pytest.approx(a / b, rel=1e-9)


def test_verdicts_on_the_real_runs(section, size_spec):
    """Every prediction's verdict is the interval rule applied to its interval and its plan bound; the fixed
    cost's bound is judged from the fit's own interval."""
    rows = section.tables["model_size_predictions"].to_dict("records")
    assert {r["prediction"] for r in rows} == {p.name for p in size_spec.predictions}
    assert len(size_spec.predictions) == 12
    for r in rows:
        lo = (
            -X.INF
            if r["predicted_lo"] is None or r["predicted_lo"] != r["predicted_lo"]
            else r["predicted_lo"]
        )
        hi = (
            X.INF
            if r["predicted_hi"] is None or r["predicted_hi"] != r["predicted_hi"]
            else r["predicted_hi"]
        )
        a, b = r["interval_lo"], r["interval_hi"]
        want = "confirmed" if lo <= a and b <= hi else "refuted" if b < lo or a > hi else "inconclusive"
        assert r["verdict"] == want, r
    for f in section.findings:
        if f.extra.get("verdict") is not None:
            assert f.extra["verdict"] == X.combine([p["verdict"] for p in f.extra["points"]])
            assert f.extra["plan_source"].split(":")[0].endswith("plan.toml")
    fa = _finding(section, "fit_intercept_ms", weight_format="fp16")
    pred = _finding(section, "fixed_cost_in_range", weight_format="fp16")
    inside = 2.0 <= fa.extra["interval_lo"] and fa.extra["interval_hi"] <= 3.5
    apart = fa.extra["interval_hi"] < 2.0 or fa.extra["interval_lo"] > 3.5
    assert pred.extra["verdict"] == ("confirmed" if inside else "refuted" if apart else "inconclusive")
    check = _finding(section, "arms_match_plans")
    assert check.value is True and check.extra["arms"] == 10


def test_every_size_row_is_cited_in_each_run(section, campaign, size_spec):
    """Every run's table row (its own plan copy: the repeats' copies hold three more header lines) states
    the arm's size, format and the predicted ITL the run table shows."""
    rows = section.tables["model_size_runs"].to_dict("records")
    assert len(rows) == 12
    for r in rows:
        text = _cited_line_of(r["plan_source"])
        assert f"predicted ITL   {r['predicted_itl_ms']:.2f} ms" in text, text
        assert f" {r['size'].upper()} " in text.upper() and text.startswith("#"), text
        assert text == _table_row(campaign, size_spec, r["run"])


def _cited_line_of(cite: str) -> str:
    path, line = cite.rsplit(":", 1)
    return (H200 / path).read_text().splitlines()[int(line) - 1]


def test_plane_fit_exact():
    """y = 1 + 2·x1 + 3·x2 exactly on non-collinear points: the coefficients back, r² = 1."""
    x1, x2 = [0.0, 1.0, 2.0, 0.0, 3.0], [0.0, 0.0, 1.0, 2.0, 5.0]
    ys = [1 + 2 * a + 3 * b for a, b in zip(x1, x2, strict=True)]
    f = fits.least_squares_plane(x1, x2, ys)
    assert (f.intercept, f.b1, f.b2, f.r2) == pytest.approx((1.0, 2.0, 3.0, 1.0))
    with pytest.raises(ValueError, match="collinear"):
        fits.least_squares_plane([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
