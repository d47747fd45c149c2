"""The figures, read the way a reader meets them (issue #10 item 5): every figure the analysis writes for the
committed campaigns (raw/) and the reference campaign, rendered to SVG with vl-convert exactly as the report
renders it, must answer its question legibly:
- at most 8 legend entries, no two alike in one legend, none cut short; marks in every figure;
- every axis titled, a quantitative axis with its unit (or a count); no spec with an empty data set;
- no line joins points of different tests (a concurrency curve through length-sweep or overload points);
- the TTFT anatomy's sweep panel is scaled to the sweep, not to the overload point (minutes);
- the comparison draws no CPU campaign on GPU axes; the latest round is the first (solid) dash;
- a figure with nothing to draw is not written, and index.json says why.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.core import charts
from analysis.core import labels_zh as zh
from analysis.pipeline.analyze import analyze
from analysis.report.figures import prepare_spec, spec_to_svg

REPO = Path(__file__).resolve().parents[1]
RAW = REPO / "raw"
REF = "rtx4090-qwen2.5-7b"
CPU = "cpu-tiny-qwen2"
MAX_LEGEND_ENTRIES = 8
# a quantitative axis names its unit in full-width brackets, or counts something
UNIT = re.compile(r"（[^）]+）")
COUNTS = {zh.COLUMNS["concurrency"]}

pytestmark = pytest.mark.skipif(
    not (RAW / CPU).is_dir(), reason="our own campaigns are not committed in raw/"
)


@pytest.fixture(scope="module")
def out(tmp_path_factory, reference_raw) -> Path:
    roots = [RAW, *([reference_raw] if reference_raw else [])]
    res = tmp_path_factory.mktemp("res")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        list(analyze(roots, res, None))
    return res


@pytest.fixture(scope="module")
def figures(out) -> dict[str, tuple[dict, str]]:
    """'campaign/figure' -> (spec as written, SVG as the report renders it)."""
    found = {}
    for p in sorted(out.glob("*/figures/*.vl.json")):
        spec = json.loads(p.read_text(encoding="utf-8"))
        found[f"{p.parent.parent.name}/{p.name.removesuffix('.vl.json')}"] = (
            spec,
            spec_to_svg(prepare_spec(spec)),
        )
    assert found
    return found


def _need_ref(figures) -> None:
    if not any(k.startswith(REF + "/") for k in figures):
        pytest.skip("the reference campaign is not beside the checkout")


# --- walking a spec -------------------------------------------------------------------------------------


def _units(spec: dict, data: str | None = None, facet_fields: tuple[str, ...] = ()):
    """Every unit view: (spec, its data set's name, fields of the facets above it)."""
    d = spec.get("data", {}).get("name", data) if isinstance(spec.get("data"), dict) else data
    facet = spec.get("facet")
    if isinstance(facet, dict):
        fields = tuple(v["field"] for k, v in facet.items() if isinstance(v, dict) and "field" in v)
        if "field" in facet:
            fields = (facet["field"],)
        facet_fields = facet_fields + fields
    if "mark" in spec:
        yield spec, d, facet_fields
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for sub in spec.get(key, []) or []:
            yield from _units(sub, d, facet_fields)
    if isinstance(spec.get("spec"), dict):
        yield from _units(spec["spec"], d, facet_fields)


def _mark(unit: dict) -> str:
    m = unit["mark"]
    return m["type"] if isinstance(m, dict) else m


def _field(enc: dict, ch: str) -> str | None:
    e = enc.get(ch)
    return e.get("field") if isinstance(e, dict) else None


def _series_fields(unit: dict, facet_fields: tuple[str, ...]) -> list[str]:
    enc = unit.get("encoding", {})
    return [f for f in (_field(enc, ch) for ch in ("color", "strokeDash", "detail")) if f] + list(
        facet_fields
    )


# --- the rendered SVG -----------------------------------------------------------------------------------


def _legends(svg: str) -> list[list[str]]:
    """The labels of each legend, in order."""
    out = []
    for block in re.split(r'<g class="mark-group role-legend"', svg)[1:]:
        out.append(re.findall(r'role-legend-label".*?<text[^>]*>([^<]*)</text>', block, flags=re.S))
    return out


def _axes(svg: str) -> list[tuple[str, str, str]]:
    """(X|Y, title, scale description) of every axis drawn."""
    return re.findall(r'aria-label="([XY])-axis(?: titled \'([^\']*)\')? for an? ([^"]*)"', svg)


# --- tests ----------------------------------------------------------------------------------------------


def test_legends_fit(figures):
    for name, (_, svg) in figures.items():
        legends = _legends(svg)
        labels = [x for lg in legends for x in lg]
        assert len(labels) <= MAX_LEGEND_ENTRIES, f"{name}: {len(labels)} legend entries: {labels}"
        for lg in legends:
            assert len(lg) == len(set(lg)), f"{name}: identical legend labels {lg}"
            assert all(x.strip() and not x.endswith("…") for x in lg), f"{name}: empty or cut label in {lg}"


def _visible(kind: str, body: str) -> bool:
    """Whether a mark group draws something a reader sees: a bar with width and height (a bar from 0 on a log
    axis is drawn 0 px wide), a line through two points or more, a symbol, a rule."""
    paths = re.findall(r' d="([^"]*)"', body)
    if kind == "rect":
        return any(re.search(r"h-?[1-9.]", d) and re.search(r"v-?[1-9.]", d) for d in paths)
    if kind == "line":
        return any("L" in d for d in paths)
    return bool(paths) or "<line" in body


def test_every_figure_draws_marks(figures):
    for name, (_, svg) in figures.items():
        marks = re.findall(r'<g class="mark-([a-z]+) role-mark[^"]*"[^>]*>(.*?)</g>', svg, flags=re.S)
        assert marks, f"{name}: no marks"
        for kind, body in marks:
            assert _visible(kind, body), f"{name}: a {kind} mark group that draws nothing visible"


def test_every_axis_is_titled_with_its_unit(figures):
    for name, (_, svg) in figures.items():
        axes = _axes(svg)
        assert axes, name
        for xy, title, scale in axes:
            assert title, f"{name}: a {xy} axis without a title"
            assert re.search(r"[\u4e00-\u9fff]", title), f"{name}: {xy} axis title {title!r} is not Chinese"
            if "discrete" not in scale:
                assert UNIT.search(title) or title in COUNTS, f"{name}: {xy} axis {title!r} has no unit"


def test_no_spec_draws_an_empty_data_set(figures):
    for name, (spec, _) in figures.items():
        datasets = spec.get("datasets", {})
        assert datasets and all(len(rows) for rows in datasets.values()), f"{name}: empty data set"
        for unit, data, _ in _units(spec):
            inline = unit.get("data", {}).get("values") if isinstance(unit.get("data"), dict) else None
            assert inline or (data in datasets and datasets[data]), f"{name}: a view without rows"


def test_no_line_joins_different_tests(figures):
    """A line's series (colour × dash × detail × facet) holds points of one test kind; only the
    model-structure figures (theory, no test) draw lines from tables without one."""
    checked = 0
    for name, (spec, _) in figures.items():
        if name.split("/")[1].startswith("structure_"):
            continue
        for unit, data, facet_fields in _units(spec):
            if _mark(unit) != "line":
                continue
            rows = pd.DataFrame(spec["datasets"][data])
            assert "test_kind" in rows, f"{name}: a line drawn from rows that do not say their test"
            fields = _series_fields(unit, facet_fields)
            kinds = rows.groupby(fields)["test_kind"].nunique() if fields else rows["test_kind"].nunique()
            assert (pd.Series(kinds) <= 1).all(), f"{name}: a line through points of different tests"
            # a concurrency curve is drawn through concurrency-sweep points only
            if _field(unit.get("encoding", {}), "x") == "concurrency":
                assert set(rows["test_kind"]) <= set(charts.SWEEP_KINDS), f"{name}: {set(rows['test_kind'])}"
            checked += 1
    assert checked >= 10


def test_ttft_sweep_panel_is_scaled_to_the_sweep(figures, out):
    _need_ref(figures)
    spec, svg = figures[f"{REF}/ttft_anatomy"]
    table = pd.read_csv(out / REF / "tables" / "ttft_anatomy.csv")
    sweep = table[table["test_kind"].isin(charts.SWEEP_KINDS) & ~table["warmup"]]
    overload = table[table["test_kind"] == "overload"]
    assert (
        overload["mean_ttft_ms"].max() > 50 * sweep["mean_ttft_ms"].max()
    )  # the case that flattened the sweep
    y_axes = [(t, s) for xy, t, s in _axes(svg) if xy == "Y"]
    panels = [p for p in spec.get("hconcat", [])]
    assert len(panels) == len(y_axes) >= 2
    for panel, (_, scale) in zip(panels, y_axes, strict=True):
        kinds = {r["test_kind"] for r in spec["datasets"][panel["data"]["name"]]}
        top = float(re.search(r"to ([\d,.]+)$", scale).group(1).replace(",", ""))
        if kinds <= set(charts.SWEEP_KINDS):
            assert top < 10 * sweep["mean_ttft_ms"].max(), f"sweep panel runs to {top} ms"
    assert any(r["test_kind"] == "overload" for p in panels for r in spec["datasets"][p["data"]["name"]])


def test_comparison_draws_no_cpu_campaign(figures, out):
    comp = {k: v for k, v in figures.items() if k.startswith("_comparison/")}
    if not comp:
        pytest.skip("one campaign only")
    roof = pd.read_csv(out / "_comparison" / "tables" / "comparison_roofline.csv")
    assert CPU in set(roof["campaign"])  # the table has it: the figures must leave it out
    for name, (spec, _) in comp.items():
        rows = [r for rows in spec["datasets"].values() for r in rows]
        assert rows and not any(r.get("campaign") == CPU or r.get("gpu") == "cpu" for r in rows), name


def test_latest_round_is_solid_and_first(figures):
    _need_ref(figures)
    seen = 0
    for name, (spec, _) in figures.items():
        if not name.startswith(REF + "/"):
            continue
        for unit, _, _ in _units(spec):
            dash = unit.get("encoding", {}).get("strokeDash", {})
            if dash.get("field") == "round_zh":
                assert dash["scale"]["domain"][0] == zh.ROUNDS["round2"], name
                assert dash["scale"]["range"][0] == [1, 0], name
                seen += 1
    assert seen >= 4


def test_a_figure_without_data_is_not_written_and_says_why(out):
    index = json.loads((out / CPU / "index.json").read_text())
    missing = index["figures_missing"]
    # a CPU has no datasheet bandwidth: no roofline to draw
    assert missing["roofline_itl_floor"]["reason"] == "no_gpu_datasheet"
    assert missing["engines_itl_roofline"]["reason"] == "no_gpu_datasheet"
    # the smoke run's overload timeline is one sample: no line (drawn only where another run has a timeline)
    if "overload_timeline" in missing:
        assert missing["overload_timeline"]["reason"] == "too_few_points"
    for name, why in missing.items():
        assert why["reason"] in zh.REASONS, why
        assert not (out / CPU / "figures" / f"{name}.vl.json").exists()
        assert name not in index["figures"]


def test_specs_are_deterministic(out):
    tables = {
        p.stem: pd.read_csv(p) for p in sorted((out / CPU / "tables").glob("*.csv")) if p.stat().st_size > 1
    }
    a, b = charts.figure_specs(tables), charts.figure_specs(tables)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_parameter_bars_stack_to_each_groups_total(out, figures):
    """The parameter figure's MLP bar is as long as gate + up + down together (5.7 B on Qwen2.5-7B), not one
    matrix drawn over the others (1.9 B): the longest bar's right end, in px, read on the x axis' ticks."""
    for name, (_, svg) in figures.items():
        if not name.endswith("/structure_params"):
            continue
        table = out / name.split("/")[0] / "tables" / "structure_params.csv"
        rows = list(csv.DictReader(table.open(encoding="utf-8")))
        mlp_b = sum(float(r["params"]) for r in rows if r["group"] == "mlp") / 1e9
        bars = "".join(re.findall(r'<g class="mark-rect role-mark[^"]*"[^>]*>(.*?)</g>', svg, flags=re.S))
        ends = [float(x) + float(w) for x, w in re.findall(r' d="M([\d.]+),[\d.]+h([\d.]+)v', bars)]
        x_labels = re.findall(r'transform="translate\(([\d.]+),15\)"[^>]*>([\d.,]+)</text>', svg)
        ticks = {float(t.replace(",", "")): float(x) for x, t in x_labels}
        assert len(ticks) >= 2 and ends, name
        (t0, x0), (t1, x1) = sorted(ticks.items())[:2]
        drawn_b = t0 + (max(ends) - x0) * (t1 - t0) / (x1 - x0)
        assert drawn_b == pytest.approx(mlp_b, rel=0.03), (
            f"{name}: longest bar {drawn_b:.2f} B, MLP {mlp_b:.2f} B"
        )
