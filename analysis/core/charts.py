"""One function per figure: a tidy table in, a Vega-Lite spec (an Altair chart) out, or the reason it cannot
be drawn. No statistics here: every number a chart draws is a column the reconciliations computed. Titles
and axis titles come from labels_zh.

Each figure answers one question, so the house style is small multiples, not one crowded panel:
- colour = engine (with its weight format), dash = round (the latest round solid and listed first); other
  splits (metric, percentile, test kind, GPU) are panels, so a panel carries a handful of lines at most.
- A line joins points of one test only: concurrency-sweep points form a concurrency curve; length-sweep
  and overload points sit in their own panels (every table a line is drawn from carries ``test_kind``).
- A panel's scale is its own where one test would flatten another (the overload TTFT is 100× the sweep's).
- A figure with nothing to draw (an empty table, a roofline without a datasheet bandwidth, a timeline of
  one sample) is not emitted; ``figure_specs`` returns why instead, for the report to say so.

Gated-out points are never dropped: they are drawn as crosses (or faded bars) under a legend entry that
says they failed a self-check and were kept (labels_zh.GATE_LEGEND); the entry appears where a point failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import altair as alt
import pandas as pd

from analysis.core import gpus
from analysis.core import labels_zh as zh

# Altair refuses to embed a table of more than 5,000 rows (MaxRowsError); an overload timeline of ~20 minutes
# has more. The specs are written to files and rendered once at build time, so the browser-side concern behind
# the limit does not apply here.
alt.data_transformers.disable_max_rows()

WIDTH = 560
HEIGHT = 320
# one panel of a small-multiples figure
PANEL_WIDTH = 300
PANEL_HEIGHT = 200
# a bar of a per-point bar panel, px
BAR_STEP = 30
# between the panels of a small-multiples figure, px (room for each panel's own y-axis title)
PANEL_SPACING = 28

SWEEP_KINDS = ("concurrency_sweep", "engine_comparison")
# panels of a figure split by test kind, in reading order
KIND_ORDER = ("concurrency_sweep", "engine_comparison", "length_sweep", "overload")
# the latest round solid, earlier rounds dashed (then dotted)
ROUND_DASHES = ([1, 0], [6, 3], [2, 2], [8, 3, 2, 3])


@dataclass(frozen=True)
class Missing:
    """Why a figure is not drawn: a labels_zh.REASONS code and a plain-English detail."""

    reason: str
    detail: str

    def to_obj(self) -> dict[str, str]:
        return {"reason": self.reason, "detail": self.detail}


Drawn = alt.TopLevelMixin | Missing


def engine_format_zh(engine: str, weight_format: object) -> str:
    """A series' Chinese name from its own row: `llama.cpp（F16）`; the bare engine name where the table does
    not say which weight format the engine served (never a format assumed from another campaign)."""
    name = zh.ENGINE_NAMES.get(engine, engine)
    if _blank(weight_format):
        return name
    fmt = str(weight_format)
    return f"{name}（{zh.WEIGHT_FORMATS.get(fmt, fmt.upper())}）"


def _blank(v: object) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v == ""


def _round_order_key(r: str) -> tuple:
    """round2 after round1, round10 after round9 (digits compared as numbers)."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", r or ""))


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Chinese display columns for engine/round/gate/test kind (a lookup, not a statistic)."""
    out = df.copy()
    if "engine" in out:
        fmts = out["weight_format"] if "weight_format" in out else [None] * len(out)
        out["engine_zh"] = [engine_format_zh(e, f) for e, f in zip(out["engine"], fmts, strict=True)]
    if "round" in out:
        out["round"] = ["" if _blank(r) else str(r) for r in out["round"]]
        out["round_zh"] = out["round"].map(lambda r: zh.ROUNDS.get(r, r))
    if "gate_ok" in out:
        out["gate_zh"] = out["gate_ok"].map(lambda g: zh.GATE_LEGEND[bool(g)])
    if "test_kind" in out:
        out["kind_zh"] = out["test_kind"].map(lambda k: zh.TEST_KINDS.get(k, k))
    if "engine_zh" in out and "round_zh" in out:
        # a campaign of our own has no rounds: the series is the engine and its format alone
        out["series_zh"] = [
            f"{r} · {e}" if r else e for r, e in zip(out["round_zh"], out["engine_zh"], strict=True)
        ]
    return out


def _distinct(d: pd.DataFrame, label: str, key: str) -> list[str]:
    """One legend label per series: the ``label`` column's value, with the run's ordinal added only where two
    different runs would otherwise share a name (a repeat of one plan: 「第 2 次运行」, never the run's folder
    name, which reads the same in both)."""
    ordinal = _run_ordinals(d, label, key)
    return [ordinal.get((s, k), s) for s, k in zip(d[label], d[key], strict=True)]


def _run_ordinals(d: pd.DataFrame, label: str, key: str) -> dict[tuple[str, str], str]:
    """(label, run) -> 「label · 第 n 次运行」 for labels shared by several runs, n in the runs' name order
    (the collector names a repeat ``<run>-2``)."""
    out = {}
    for s, g in d.groupby(label):
        runs = sorted({str(k) for k in g[key]}, key=_round_order_key)
        if len(runs) > 1:
            out.update({(s, r): f"{s} · {zh.RUN_ORDINAL.format(n=i)}" for i, r in enumerate(runs, 1)})
    return out


def _fig(name: str) -> dict[str, str]:
    return zh.FIGURES[name]


def _present(df: pd.DataFrame, *cols: str) -> list[str]:
    """The value columns a table actually has with at least one value (a campaign without theory or
    counters lacks some)."""
    return [c for c in cols if c in df.columns and df[c].notna().any()]


# --- shared encodings ---------------------------------------------------------------------------------


def _rounds_latest_first(d: pd.DataFrame) -> list[str]:
    rounds = sorted(
        {r for r in d.get("round", pd.Series(dtype=str)) if r}, key=_round_order_key, reverse=True
    )
    return [zh.ROUNDS.get(r, r) for r in rounds]


def _round_dash(d: pd.DataFrame) -> alt.StrokeDash | None:
    """Dash = round, the latest solid and first in the legend; None where the table has one round or none."""
    order = _rounds_latest_first(d)
    if len(order) < 2:
        return None
    return alt.StrokeDash(
        "round_zh:N",
        title=zh.COLUMNS["round"],
        sort=order,
        scale=alt.Scale(domain=order, range=list(ROUND_DASHES[: len(order)])),
    )


def _dash_scale(shown: pd.Series, measured: str, *floors: str) -> alt.Scale:
    """Measured lines solid, floors dashed (each floor its own dash); the legend lists only what ``shown`` has
    (a CPU campaign has no floor to draw)."""
    dashes = {measured: [1, 0], **dict(zip(floors, ([6, 3], [2, 2], [8, 3, 2, 3]), strict=False))}
    present = set(shown)
    domain = [k for k in dashes if k in present]
    return alt.Scale(domain=domain, range=[dashes[k] for k in domain])


def _color(field: str, title: str, values: pd.Series) -> alt.Color:
    """A nominal colour with its domain sorted (the same series gets the same colour in every panel)."""
    domain = sorted({str(v) for v in values})
    return alt.Color(f"{field}:N", title=title, sort=domain, scale=alt.Scale(domain=domain))


def _conc_x(values: pd.Series, title: str) -> alt.X:
    """Concurrency on a log-2 axis, ticks at the concurrencies measured (never 1.5 or 2.5)."""
    ticks = sorted({int(v) for v in values.dropna()})
    return alt.X(
        "concurrency:Q",
        title=title,
        scale=alt.Scale(type="log", base=2, nice=False, padding=8),
        axis=alt.Axis(values=ticks, format="d"),
    )


def _gate_shape(d: pd.DataFrame) -> alt.Shape | None:
    """Crosses for points that failed a self-check; no legend where every point passed."""
    if "gate_ok" not in d or d["gate_ok"].astype(bool).all():
        return None
    return alt.Shape(
        "gate_zh:N",
        title=zh.COLUMNS["gate_ok"],
        scale=alt.Scale(domain=[zh.GATE_LEGEND[True], zh.GATE_LEGEND[False]], range=["circle", "cross"]),
    )


def _gate_opacity(d: pd.DataFrame) -> alt.Opacity | None:
    if "gate_ok" not in d or d["gate_ok"].astype(bool).all():
        return None
    return alt.Opacity(
        "gate_zh:N",
        title=zh.COLUMNS["gate_ok"],
        scale=alt.Scale(domain=[zh.GATE_LEGEND[True], zh.GATE_LEGEND[False]], range=[1.0, 0.4]),
    )


def _enc(**channels) -> dict:
    """Encoding channels without the ones a table does not need (None)."""
    return {k: v for k, v in channels.items() if v is not None}


def _lines_and_points(base: alt.Chart, d: pd.DataFrame, size: int = 50) -> alt.LayerChart:
    """The line joins one series' points; the points carry the gate shape (filled where all passed). The dash
    stays on the line alone, so its legend shows the dash (not a dashed circle)."""
    shape = _gate_shape(d)
    pts = base.mark_point(size=size, filled=shape is None)
    if shape is not None:
        pts = pts.encode(shape=shape)
    pts = pts.copy(deep=True)
    pts.encoding.strokeDash = alt.Undefined
    line = base.mark_line()
    if "main" in d and not d["main"].all():  # a series' other runs: thin, behind
        line = line.encode(strokeWidth=alt.condition("datum.main", alt.value(2.5), alt.value(1)))
        pts = pts.encode(size=alt.condition("datum.main", alt.value(size), alt.value(12)))
    return alt.LayerChart(layer=[line, pts])  # alt.layer types as a facet too; these have no facet channels


def _sweeps(df: pd.DataFrame) -> pd.DataFrame:
    """The concurrency-sweep rows of a table (all of them where the table does not say its test kind)."""
    if "test_kind" not in df:
        return df
    return df[df["test_kind"].isin(SWEEP_KINDS)]


# colours of a series' main run, in the order of the sorted series names; a series' other runs are grey
PALETTE = ("#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6")
OTHER_COLOR = "#bbbbbb"


def _main_runs(d: pd.DataFrame, run_cols: list[str]) -> pd.Series:
    """Whether each row is its series' main run: per round, engine (with format) and test kind, the run with
    the most measured points of that kind (ties: the first by name). The others — a repeat, the arms of a
    one-knob experiment — are context on a campaign's figure (thin, grey, one legend entry); their own pages
    compare them. Every row of a table without a run column is main."""
    if not all(c in d for c in run_cols):
        return pd.Series(True, index=d.index)
    run = d[run_cols].astype(str).agg(" / ".join, axis=1)
    kind = d["test_kind"] if "test_kind" in d else pd.Series("", index=d.index)
    at = [c for c in ("concurrency", "input_len_tokens") if c in d]
    points = (
        d.assign(_run=run, _kind=kind, _at=d[at].astype(str).agg(" / ".join, axis=1))
        .groupby(["round_zh", "engine_zh", "_kind", "_run"])["_at"]
        .nunique()
        .reset_index()
        .sort_values(
            ["round_zh", "engine_zh", "_kind", "_at", "_run"], ascending=[True, True, True, False, True]
        )
    )
    main = set(
        points.drop_duplicates(["round_zh", "engine_zh", "_kind"])[["_kind", "_run"]].itertuples(index=False)
    )
    return pd.Series([(k, r) in main for k, r in zip(kind, run, strict=True)], index=d.index)


def _with_runs(d: pd.DataFrame, run_cols: list[str]) -> pd.DataFrame:
    """Adds ``main`` (see _main_runs), ``run_id`` (one line per run) and ``colour_zh`` (the engine for a main
    run, one shared name for the other runs)."""
    d = d.copy()
    d["main"] = _main_runs(d, run_cols)
    cols = [c for c in run_cols if c in d]
    d["run_id"] = d[cols].astype(str).agg(" / ".join, axis=1) if cols else ""
    d["colour_zh"] = [e if m else zh.OTHER_RUNS for e, m in zip(d["engine_zh"], d["main"], strict=True)]
    return d


def _run_color(d: pd.DataFrame, title: str) -> alt.Color:
    """Colour = engine for main runs, grey for a series' other runs (listed last)."""
    names = sorted({c for c in d["colour_zh"] if c != zh.OTHER_RUNS})
    domain = names + ([zh.OTHER_RUNS] if (~d["main"]).any() else [])
    rng = [PALETTE[i % len(PALETTE)] for i in range(len(names))] + [OTHER_COLOR] * (len(domain) - len(names))
    return alt.Color("colour_zh:N", title=title, sort=domain, scale=alt.Scale(domain=domain, range=rng))


def _omitted(d: pd.DataFrame) -> str:
    """The subtitle's note on a series' other runs left out of a figure (empty when there are none)."""
    n = d.loc[~d["main"], "run_id"].nunique()
    return zh.OTHER_RUNS_OMITTED.format(n=n) if n else ""


def _titled(title: str, subtitle: str) -> alt.TitleParams:
    return alt.TitleParams(text=title, subtitle=subtitle, anchor="start")


def _no_rows(table: str) -> Missing:
    return Missing("no_rows", f"table {table} has no rows to draw")


# --- structure -----------------------------------------------------------------------------------------


# a matrix below this share of the model is invisible as a bar segment: it gets no legend entry of its own
STRUCTURE_MIN_SHARE_PCT = 0.1


def structure_params(df: pd.DataFrame) -> Drawn:
    """A bar per component group (MLP, attention, …), its total the bar's length (MLP 5.7 B = gate + up +
    down): a group of several visible matrices is stacked from them, coloured by matrix; a group of one (the
    embedding, the output head) or of invisible ones (the norms) is one grey bar."""
    f = _fig("structure_params")
    d = df.assign(
        params_b=df["params"] / 1e9, component_zh=df["group"].map(lambda g: zh.COMPONENTS.get(g, g))
    )
    groups = list(d.groupby("component_zh")["params_b"].sum().sort_values(ascending=False).index)
    visible = d[d["share_pct"] >= STRUCTURE_MIN_SHARE_PCT]
    parts = d["group"].isin([g for g, n in visible.groupby("group").size().items() if n > 1])
    y = alt.Y("component_zh:N", title=f["y"], sort=groups)
    x_title = f["x"]
    order = {c: i for i, c in enumerate(d["component"])}  # the table's order: a layer's matrices in turn
    stacked = (
        alt.Chart(d[parts].assign(part_order=d["component"].map(order)))
        .mark_bar(stroke="white", strokeWidth=1)
        .encode(
            x=alt.X("params_b:Q", title=x_title, stack="zero"),
            y=y,
            color=alt.Color("component:N", title=f["color"], sort=list(d.loc[parts, "component"])),
            order=alt.Order("part_order:Q"),
            tooltip=["component:N", "params:Q", "share_pct:Q"],
        )
    )
    whole = (
        alt.Chart(d[~parts])
        .mark_bar(color=OTHER_COLOR)
        .encode(x=alt.X("sum(params_b):Q", title=x_title), y=y, tooltip=["component_zh:N", "sum(params):Q"])
    )
    return alt.layer(stacked, whole).properties(width=WIDTH, height=HEIGHT, title=f["title"])


def structure_attention_flops(df: pd.DataFrame) -> Drawn:
    f = _fig("structure_attention_flops")
    d = df.assign(part_zh=df["part"].map(lambda p: zh.COMPONENTS.get(p, p)))
    return (
        alt.Chart(d, title=f["title"])
        .mark_line(point=True)
        .encode(
            x=alt.X("seq_len_tokens:Q", title=f["x"], scale=alt.Scale(type="log")),
            y=alt.Y("gflop_per_token:Q", title=f["y"], scale=alt.Scale(type="log")),
            color=_color("part_zh", f["color"], d["part_zh"]),
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


# --- concurrency --------------------------------------------------------------------------------------


def concurrency_throughput(df: pd.DataFrame) -> Drawn:
    """Two panels (output, total throughput), each with its own y scale; a line per engine × round × run."""
    f = _fig("concurrency_throughput")
    d = _labelled(_sweeps(df)).dropna(subset=["tokens_per_s"])
    if not len(d):
        return _no_rows("concurrency_throughput")
    d = _with_runs(d, ["round", "test"])
    d["kind_zh"] = d["series"].map(lambda s: zh.SERIES.get(s, s))
    order = [zh.SERIES[s] for s in ("output", "total") if s in set(d["series"])]
    base = alt.Chart().encode(
        **_enc(
            x=_conc_x(d["concurrency"], f["x"]),
            y=alt.Y("tokens_per_s:Q", title=f["y"]),
            color=_run_color(d, f["color"]),
            strokeDash=_round_dash(d),
            detail=alt.Detail("run_id:N"),
        )
    )
    return (
        _lines_and_points(base, d)
        .properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
        .facet(data=d, column=alt.Column("kind_zh:N", title=None, sort=order), title=f["title"])
        .resolve_scale(y="independent")
    )


LATENCY_METRICS = ("ttft", "itl", "tpot", "e2el")
LATENCY_STATS = ("p50", "p99")


def concurrency_latency(df: pd.DataFrame) -> Drawn:
    """A row per metric (its own y, log), a column per percentile (p50 | p99, shared y within the row, so
    their distance is the tail); a line per engine × round × run."""
    f = _fig("concurrency_latency")
    d = _labelled(_sweeps(df[df["stat"].isin(LATENCY_STATS)])).dropna(subset=["value_ms"])
    d = d[d["value_ms"] > 0]  # a log axis: a 0 ms percentile (a cut point) has no place on it
    if not len(d):
        return _no_rows("concurrency_latency")
    d = _with_runs(d, ["round", "test"])
    d["stat_zh"] = d["stat"].map(lambda s: zh.PERCENTILES.get(s, s))
    stats = [zh.PERCENTILES[s] for s in LATENCY_STATS if s in set(d["stat"])]
    rows = []
    for m in LATENCY_METRICS:
        sub = d[d["metric"] == m]
        if not len(sub):
            continue
        base = alt.Chart().encode(
            **_enc(
                x=_conc_x(d["concurrency"], f["x"]),
                y=alt.Y("value_ms:Q", title=zh.COLUMNS[f"{m}_ms"], scale=alt.Scale(type="log")),
                color=_run_color(d, f["color"]),
                strokeDash=_round_dash(d),
                detail=alt.Detail("run_id:N"),
            )
        )
        rows.append(
            _lines_and_points(base, d, size=40)
            .properties(width=260, height=150)
            .facet(data=sub, column=alt.Column("stat_zh:N", title=None, sort=stats))
        )
    return alt.vconcat(*rows, title=f["title"])


def _kind_panels(d: pd.DataFrame, build: Callable[[pd.DataFrame, str], alt.TopLevelMixin]) -> list:
    """One panel per test kind present (sweep, length sweep, overload), in reading order, each titled."""
    panels = []
    for kind in KIND_ORDER:
        sub = d[d["test_kind"] == kind]
        if len(sub):
            panels.append(build(sub, kind))
    return panels


def concurrency_utilization(df: pd.DataFrame) -> Drawn:
    """MFU and MBU per test kind: the sweep as a curve over concurrency, the length sweep over input length,
    the overload point alone; one y (0–100 %) for all panels."""
    f = _fig("concurrency_utilization")
    if "test_kind" not in df:
        return Missing(
            "no_rows", "concurrency_utilization has no test_kind column: test kinds cannot be kept apart"
        )
    d = _labelled(df[~df.get("warmup", pd.Series(False, index=df.index)).astype(bool)])
    if not len(d):
        return _no_rows("concurrency_utilization")
    d = _with_runs(d, ["round", "test"])
    omitted = _omitted(d)
    d = d[d["main"]]
    long = d.melt(
        id_vars=[
            c
            for c in (
                "concurrency",
                "input_len_tokens",
                "series_zh",
                "round_zh",
                "round",
                "gate_zh",
                "gate_ok",
                "test",
                "test_kind",
                "kind_zh",
                "engine_zh",
                "run_id",
            )
            if c in d
        ],
        value_vars=_present(d, "mfu_pct", "mbu_pct"),
        var_name="metric",
        value_name="pct",
    ).dropna(subset=["pct"])
    if not len(long):
        return _no_rows("concurrency_utilization")
    long["metric_zh"] = long["metric"].map(lambda m: zh.SERIES[m.removesuffix("_pct")])
    several = long["engine_zh"].nunique() > 1
    color = _color("metric_zh", f["color"], long["metric_zh"])
    y = alt.Y("pct:Q", title=f["y"], scale=alt.Scale(domain=[0, 100]))

    def panel(sub: pd.DataFrame, kind: str) -> alt.TopLevelMixin:
        length = kind == "length_sweep"
        x = (
            alt.X(
                "input_len_tokens:Q",
                title=zh.COLUMNS["input_len_tokens"],
                scale=alt.Scale(type="log", base=2, nice=False, padding=8),
                axis=alt.Axis(values=sorted({int(v) for v in sub["input_len_tokens"].dropna()}), format="d"),
            )
            if length
            else _conc_x(sub["concurrency"], f["x"])
        )
        base = alt.Chart(sub, title=zh.TEST_KINDS.get(kind, kind)).encode(
            **_enc(
                x=x,
                y=y,
                color=color,
                strokeDash=_round_dash(long),
                detail=alt.Detail("engine_zh:N") if several else alt.Detail("run_id:N"),
            )
        )
        if kind == "overload":  # one point per run: nothing to join
            shape = _gate_shape(long)
            chart = base.mark_point(size=60, filled=shape is None)
            chart = chart.encode(shape=shape) if shape is not None else chart
        else:
            chart = _lines_and_points(base, long)
        n = sub["concurrency" if not length else "input_len_tokens"].nunique()
        return chart.properties(width=max(90, min(PANEL_WIDTH, 50 * n)), height=PANEL_HEIGHT)

    series = sorted(set(long["series_zh"]))
    note = " · ".join(x for x in (" / ".join(series) if len(series) <= 2 else "", omitted) if x)
    return alt.hconcat(*_kind_panels(long, panel), title=_titled(f["title"], note) if note else f["title"])


# --- TTFT ---------------------------------------------------------------------------------------------

# the same part keeps its colour whether or not the engine reports a queue
PART_COLORS = {"queue": "#f58518", "prefill": "#4c78a8", "remainder": "#bab0ac"}


def ttft_anatomy(df: pd.DataFrame) -> Drawn:
    """Stacked bars (queue, prefill, remainder) per point; a panel per test kind and series, each with its own
    y scale: the overload TTFT (minutes) would flatten every sweep bar (milliseconds)."""
    f = _fig("ttft_anatomy")
    if "test_kind" not in df:
        return Missing("no_rows", "ttft_anatomy has no test_kind column: test kinds cannot be kept apart")
    d = _labelled(df[~df["warmup"].astype(bool)])
    if not len(d):
        return _no_rows("ttft_anatomy")
    d["part_zh"] = d["part"].map(lambda p: zh.TTFT_PARTS.get(p, p))
    # a row per series (round · engine), drawn from its main run of each test kind
    d = _with_runs(d, ["round", "test"])
    omitted = _omitted(d)
    d = d[d["main"]]
    d["run_zh"] = d["series_zh"]
    parts = [zh.TTFT_PARTS[p] for p in ("queue", "prefill", "remainder") if p in set(d["part"])]
    color = alt.Color(
        "part_zh:N",
        title=f["color"],
        sort=parts,
        scale=alt.Scale(
            domain=parts,
            range=[PART_COLORS[p] for p in ("queue", "prefill", "remainder") if p in set(d["part"])],
        ),
    )
    rounds = _rounds_latest_first(d)
    runs = sorted(
        d["run_zh"].unique(),
        key=lambda s: (rounds.index(d.loc[d["run_zh"] == s, "round_zh"].iloc[0]) if rounds else 0, s),
    )
    opacity = _gate_opacity(d)
    rows = []
    for run in runs:
        sub_run = d[d["run_zh"] == run]

        def panel(sub: pd.DataFrame, kind: str, run: str = run) -> alt.TopLevelMixin:
            length = kind == "length_sweep"
            field = "input_len_tokens" if length else "concurrency"
            n = sub[field].nunique()
            return (
                alt.Chart(sub, title=zh.TEST_KINDS.get(kind, kind))
                .mark_bar()
                .encode(
                    **_enc(
                        x=alt.X(f"{field}:O", title=zh.COLUMNS[field], axis=alt.Axis(labelAngle=0)),
                        y=alt.Y("ms:Q", title=f["y"], stack="zero"),
                        color=color,
                        opacity=opacity,
                        order=alt.Order("part_order:Q"),
                        tooltip=["point:N", "part_zh:N", "ms:Q", "share_pct:Q"],
                    )
                )
                .properties(width=max(60, BAR_STEP * n), height=PANEL_HEIGHT)
            )

        sub_run = sub_run.assign(part_order=sub_run["part"].map({"queue": 0, "prefill": 1, "remainder": 2}))
        # the series names its row (a panel title holding both overran a narrow panel into its neighbour's)
        row_title = alt.TitleParams(run, anchor="start", fontSize=12) if len(runs) > 1 else alt.Undefined
        rows.append(
            alt.hconcat(*_kind_panels(sub_run, panel), spacing=PANEL_SPACING, title=row_title).resolve_scale(
                y="independent"
            )
        )
    chart = rows[0] if len(rows) == 1 else alt.vconcat(*rows, spacing=PANEL_SPACING)
    # one series: its name under the title (the panels name only their test)
    note = " · ".join(x for x in (runs[0] if len(runs) == 1 else "", omitted) if x)
    return chart.properties(title=_titled(f["title"], note) if note else f["title"])


# --- KV -----------------------------------------------------------------------------------------------


def kv_fit(df: pd.DataFrame) -> Drawn:
    f = _fig("kv_fit")
    d = _labelled(df)
    if not len(d):
        return _no_rows("kv_fit")
    order = _rounds_latest_first(d) or sorted(set(d["round_zh"]))
    color = alt.Color("round_zh:N", title=zh.COLUMNS["round"], sort=order, scale=alt.Scale(domain=order))
    pts = (
        alt.Chart(d, title=f["title"])
        .mark_point(size=80, filled=True)
        .encode(
            **_enc(
                x=alt.X("tokens_in_flight:Q", title=f["x"]),
                y=alt.Y("peak_kv_usage_tokens:Q", title=f["y"]),
                color=color,
                shape=_gate_shape(d),
                tooltip=["point:N", "tokens_in_flight:Q", "peak_kv_usage_tokens:Q"],
            )
        )
    )
    line = (
        alt.Chart(d)
        .mark_line(strokeDash=[4, 3])
        .encode(x="tokens_in_flight:Q", y="fit_tokens:Q", color=color)
    )
    return (pts + line).properties(width=WIDTH, height=HEIGHT)


# --- overload -----------------------------------------------------------------------------------------

# lines of distinct colour one panel can hold and still be read apart
MAX_SERIES = 6
# panel -> (the timeline's columns it draws, label key of its y axis)
TIMELINE_PANELS = (
    ("kv_usage_pct", ("kv_usage_pct",), "y_kv_usage_pct"),
    ("requests", ("running", "waiting"), "y_requests"),
    ("preemptions", ("preemptions",), "y_preemptions"),
)


def overload_timeline(df: pd.DataFrame) -> Drawn:
    """A panel per quantity (KV usage %, requests, cumulative preemptions), one time axis; colour = run."""
    f = _fig("overload_timeline")
    d = _labelled(df)
    if not len(d):
        return _no_rows("overload_timeline")
    if "run" not in d:
        d["run"] = ""
    # a run with one sample has no line to draw
    d = d[d.groupby("run")["t_s"].transform("nunique") >= 2]
    if not len(d):
        return Missing("too_few_points", "the overload timeline has fewer than two samples per run")
    if d["run"].nunique() <= MAX_SERIES:
        d["run_zh"] = _distinct(d, "series_zh", "run")
    else:  # more runs than colours that read apart: a colour per series, a line per run
        d["run_zh"] = d["series_zh"]
    color = _color("run_zh", f["color"], d["run_zh"])
    panels = []
    for _, wanted, ykey in TIMELINE_PANELS:
        cols = _present(d, *wanted)
        if not cols:
            continue
        long = d.melt(
            id_vars=["run_zh", "run", "t_s"] + (["test_kind"] if "test_kind" in d else []),
            value_vars=cols,
            var_name="series",
            value_name="value",
        ).dropna(subset=["value"])
        long["what_zh"] = long["series"].map(lambda s: zh.SERIES.get(s, s))
        dash = (
            alt.StrokeDash(
                "what_zh:N",
                title=zh.COLUMNS["what"],
                sort=[zh.SERIES[c] for c in cols],
                scale=_dash_scale(long["what_zh"], zh.SERIES[cols[0]], *[zh.SERIES[c] for c in cols[1:]]),
            )
            if len(cols) > 1
            else None
        )
        panels.append(
            alt.Chart(long)
            .mark_line()
            .encode(
                **_enc(
                    x=alt.X("t_s:Q", title=f["x"]),
                    y=alt.Y("value:Q", title=f[ykey]),
                    color=color,
                    strokeDash=dash,
                    detail=alt.Detail("run:N"),
                )
            )
            .properties(width=WIDTH, height=130)
        )
    return alt.vconcat(*panels, title=f["title"]).resolve_scale(strokeDash="independent")


# --- engines ------------------------------------------------------------------------------------------


def engines_throughput(df: pd.DataFrame) -> Drawn:
    f = _fig("engines_throughput")
    d = _labelled(_sweeps(df)).dropna(subset=["output_throughput_tokens_per_s"])
    if not len(d):
        return _no_rows("engines_points")
    d = _with_runs(d, ["run"])
    base = alt.Chart(d, title=f["title"]).encode(
        **_enc(
            x=_conc_x(d["concurrency"], f["x"]),
            y=alt.Y("output_throughput_tokens_per_s:Q", title=f["y"]),
            color=_run_color(d, f["color"]),
            strokeDash=_round_dash(d),
            detail=alt.Detail("run_id:N"),
        )
    )
    return _lines_and_points(base, d, size=60).properties(width=WIDTH, height=HEIGHT)


def _round_columns(chart: alt.LayerChart, d: pd.DataFrame, title: str) -> alt.LayerChart | alt.FacetChart:
    """A column per round, the latest first; a campaign without rounds keeps one panel."""
    order = _rounds_latest_first(d)
    if len(order) < 2:
        return chart.properties(width=WIDTH, height=HEIGHT, title=title)
    return chart.properties(width=PANEL_WIDTH, height=260).facet(
        data=d, column=alt.Column("round_zh:N", title=None, sort=order), title=title
    )


def engines_itl_roofline(df: pd.DataFrame) -> Drawn:
    """Measured p50 ITL and its bandwidth floor, a panel per round (latest first), colour = engine."""
    f = _fig("engines_itl_roofline")
    d = _labelled(_sweeps(df))
    if "roofline_floor_ms" not in d or d["roofline_floor_ms"].isna().all():
        return Missing(
            "no_gpu_datasheet", "no bandwidth floor: the campaign's device has no datasheet bandwidth"
        )
    d = _with_runs(d, ["run"])
    long = d.melt(
        id_vars=["concurrency", "engine_zh", "round_zh", "round", "gate_zh", "gate_ok", "run", "test_kind"]
        + ["main", "run_id", "colour_zh"],
        value_vars=_present(d, "p50_itl_ms", "roofline_floor_ms"),
        var_name="what",
        value_name="ms",
    ).dropna(subset=["ms"])
    long["what_zh"] = long["what"].map(
        {"p50_itl_ms": zh.SERIES["measured_p50_itl"], "roofline_floor_ms": zh.SERIES["roofline_floor"]}
    )
    # a format's measured line and its floor share the series' colour; the floor is dashed
    base = alt.Chart().encode(
        x=_conc_x(long["concurrency"], f["x"]),
        y=alt.Y("ms:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=_run_color(long, f["color"]),
        strokeDash=alt.StrokeDash(
            "what_zh:N",
            title=zh.COLUMNS["what"],
            scale=_dash_scale(long["what_zh"], zh.SERIES["measured_p50_itl"], zh.SERIES["roofline_floor"]),
        ),
        detail=alt.Detail("run_id:N"),
    )
    layer = _lines_and_points(base, long, size=40)
    if len(_rounds_latest_first(long)) < 2:
        return alt.layer(*layer.layer, data=long).properties(width=WIDTH, height=HEIGHT, title=f["title"])
    return _round_columns(layer, long, f["title"])


def selection_pareto(df: pd.DataFrame) -> Drawn:
    f = _fig("selection_pareto")
    d = _labelled(_sweeps(df)).dropna(subset=["p99_ttft_ms", "output_throughput_tokens_per_s"])
    d = d[(d["p99_ttft_ms"] > 0) & (d["output_throughput_tokens_per_s"] > 0)]
    if not len(d):
        return _no_rows("selection_curve")
    enc = _enc(
        x=alt.X("p99_ttft_ms:Q", title=f["x"], scale=alt.Scale(type="log")),
        y=alt.Y("output_throughput_tokens_per_s:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=_color("engine_zh", f["color"], d["engine_zh"]),
        strokeDash=_round_dash(d),
        tooltip=["series_zh:N", "concurrency:Q", "p99_ttft_ms:Q", "output_throughput_tokens_per_s:Q"],
    )
    shape = _gate_shape(d)
    pts = alt.Chart(d, title=f["title"]).mark_point(size=60, filled=shape is None).encode(**enc)
    pts = pts.encode(shape=shape) if shape is not None else pts
    # the front is a line where it has two points or more (a front of one point is its point)
    front = d[d["on_front"].astype(bool)]
    front = front[front.groupby("series_zh")["concurrency"].transform("size") >= 2]
    if not len(front):
        return pts.properties(width=WIDTH, height=HEIGHT)
    line = alt.Chart(front).mark_line().encode(**enc)
    return alt.layer(line, pts).properties(width=WIDTH, height=HEIGHT)


# --- reproducibility ----------------------------------------------------------------------------------


def _comparison_zh(a: object, b: object, comparison: str) -> str:
    f = _fig("reproducibility_delta")
    if _blank(a) or _blank(b):
        return comparison
    ra, rb = zh.ROUNDS.get(str(a), str(a)), zh.ROUNDS.get(str(b), str(b))
    return f["within_round"].format(round=ra) if a == b else f["between_rounds"].format(a=ra, b=rb)


def reproducibility_delta(df: pd.DataFrame) -> Drawn:
    """Throughput change per concurrency, a panel per engine; a bar per comparison (between rounds,
    repeats)."""
    f = _fig("reproducibility_delta")
    if not len(df):
        return _no_rows("reproducibility")
    d = _labelled(df)
    a = d["a_round"] if "a_round" in d else [None] * len(d)
    b = d["b_round"] if "b_round" in d else [None] * len(d)
    d["comparison_zh"] = [_comparison_zh(x, y, c) for x, y, c in zip(a, b, d["comparison"], strict=True)]
    d["engine_name_zh"] = d["engine"].map(lambda e: zh.ENGINE_NAMES.get(e, e))
    order = sorted(set(d["comparison_zh"]))
    color = alt.Color("comparison_zh:N", title=f["color"], sort=order, scale=alt.Scale(domain=order))
    opacity = _gate_opacity(d)
    panels = []
    for engine in sorted(set(d["engine_name_zh"])):
        sub = d[d["engine_name_zh"] == engine]
        panels.append(
            alt.Chart(sub, title=engine)
            .mark_bar()
            .encode(
                **_enc(
                    x=alt.X("concurrency:O", title=f["x"], axis=alt.Axis(labelAngle=0)),
                    xOffset=alt.XOffset("comparison_zh:N", sort=order),
                    y=alt.Y("delta_pct:Q", title=f["y"]),
                    color=color,
                    opacity=opacity,
                    tooltip=["comparison_zh:N", "concurrency:O", "delta_pct:Q"],
                )
            )
            .properties(width=max(120, 40 * sub["concurrency"].nunique()), height=PANEL_HEIGHT)
        )
    # each engine its own scales: vLLM's ≤ 1 % must not be flattened by llama.cpp's −27 %
    return alt.hconcat(*panels, title=f["title"]).resolve_scale(x="independent", y="independent")


# --- roofline (own campaigns) and the cross-campaign comparison ---------------------------------------


def _has_floor(d: pd.DataFrame) -> bool:
    return bool(_present(d, "floor_datasheet_ms", "floor_measured_ms"))


# the columns a roofline figure keeps beside its values
ROOFLINE_KEEP: tuple[str, ...] = ("concurrency", "line_zh", "colour_zh", "main", "run_id", "gate_zh")
ROOFLINE_KEEP += ("gate_ok", "panel_zh", "test_kind", "run", "campaign")


def _dashed_layer(
    d: pd.DataFrame,
    f: dict[str, str],
    color: alt.Color,
    *,
    labels: dict[str, str],
    var_name: str,
    value_name: str,
    dash_order: tuple[str, ...],
    y_scale: alt.Scale | None = None,
) -> tuple[alt.LayerChart, pd.DataFrame]:
    """Columns ``labels`` names (column -> legend label) melted into one value column: colour = series, dash =
    which column (``var_name``; its legend in ``dash_order``, the measured line first)."""
    keep = [c for c in ROOFLINE_KEEP if c in d]
    long = d.melt(
        id_vars=keep, value_vars=_present(d, *labels), var_name=var_name, value_name=value_name
    ).dropna(subset=[value_name])
    long[f"{var_name}_zh"] = long[var_name].map(labels)
    base = alt.Chart().encode(
        x=_conc_x(long["concurrency"], f["x"]),
        y=alt.Y(f"{value_name}:Q", title=f["y"], scale=alt.Undefined if y_scale is None else y_scale),
        color=color,
        detail=alt.Detail("run:N"),
        strokeDash=alt.StrokeDash(
            f"{var_name}_zh:N",
            title=zh.COLUMNS[var_name],
            scale=_dash_scale(long[f"{var_name}_zh"], *dash_order),
        ),
    )
    return _lines_and_points(base, long, size=40), long


def _itl_floor_layer(
    d: pd.DataFrame, f: dict[str, str], color: alt.Color
) -> tuple[alt.LayerChart, pd.DataFrame]:
    """Measured p50 ITL beside the datasheet and measured-ceiling floors: colour = series, dash = which
    line."""
    measured, datasheet, ceiling = (
        zh.SERIES["measured_p50_itl"],
        zh.SERIES["floor_datasheet"],
        zh.SERIES["floor_measured"],
    )
    return _dashed_layer(
        d,
        f,
        color,
        labels={"p50_itl_ms": measured, "floor_datasheet_ms": datasheet, "floor_measured_ms": ceiling},
        var_name="what",
        value_name="ms",
        dash_order=(measured, datasheet, ceiling),
        y_scale=alt.Scale(type="log"),
    )


def _achievement_layer(
    d: pd.DataFrame, f: dict[str, str], color: alt.Color
) -> tuple[alt.LayerChart, pd.DataFrame]:
    """Roofline achievement against both bases (datasheet, measured ceiling): colour = series, dash =
    basis."""
    datasheet, ceiling = zh.SERIES["floor_datasheet"], zh.SERIES["floor_measured"]
    return _dashed_layer(
        d,
        f,
        color,
        labels={"achievement_datasheet_pct": datasheet, "achievement_measured_pct": ceiling},
        var_name="basis",
        value_name="pct",
        dash_order=(ceiling, datasheet),
    )


def _series_label(df: pd.DataFrame) -> pd.DataFrame:
    return _with_runs(_labelled(_sweeps(df)), ["run"])


def roofline_itl_floor(df: pd.DataFrame) -> Drawn:
    f = _fig("roofline_itl_floor")
    d = _series_label(df)
    if not _has_floor(d):
        return Missing(
            "no_gpu_datasheet", "no bandwidth floor: the campaign's device has no datasheet bandwidth"
        )
    layer, long = _itl_floor_layer(d, f, _run_color(d, f["color"]))
    return alt.layer(*layer.layer, data=long).properties(width=WIDTH, height=HEIGHT, title=f["title"])


def roofline_achievement(df: pd.DataFrame) -> Drawn:
    f = _fig("roofline_achievement")
    d = _series_label(df)
    if not _present(d, "achievement_datasheet_pct", "achievement_measured_pct"):
        return Missing(
            "no_gpu_datasheet", "no roofline achievement: the campaign's device has no datasheet bandwidth"
        )
    layer, long = _achievement_layer(d, f, _run_color(d, f["color"]))
    return alt.layer(*layer.layer, data=long).properties(width=WIDTH, height=HEIGHT, title=f["title"])


def _run_series_zh(d: pd.DataFrame) -> dict[str, str]:
    """Each run's legend name: its engine and the weight format any of its rows states."""
    out = {}
    for run, g in d.groupby("run", sort=True):
        fmts = [x for x in g.get("weight_format", pd.Series(dtype=object)) if not _blank(x)]
        out[run] = engine_format_zh(g["engine"].iloc[0], fmts[0] if fmts else None)
    if len(out) > MAX_SERIES:  # more runs than colours that read apart: a colour per engine and format
        return out
    runs = pd.DataFrame({"name": list(out.values()), "run": list(out)})
    return dict(zip(out, _distinct(runs, "name", "run"), strict=True))


def prediction_vs_measured(df: pd.DataFrame) -> Drawn:
    """Measured ÷ predicted as dots on a log axis around 1 (a bar from 0 has no place on a log axis)."""
    f = _fig("prediction_vs_measured")
    d = df.dropna(subset=["ratio"])
    d = d[d["ratio"] > 0]
    if not len(d):
        return Missing("no_prediction", "no run has both a prediction and a measurement")
    names = _run_series_zh(d)
    d = d.assign(quantity_zh=d["quantity"].map(lambda q: zh.QUANTITIES.get(q, q)), run_zh=d["run"].map(names))
    lo, hi = float(d["ratio"].min()), float(d["ratio"].max())
    domain = [min(lo, 1.0) / 1.5, max(hi, 1.0) * 1.5]
    quantities = sorted(set(d["quantity_zh"]))
    y = alt.Y("quantity_zh:N", title=f["y"], sort=quantities, axis=alt.Axis(titlePadding=16))
    one = (
        alt.Chart(pd.DataFrame({"ratio": [1.0]}))
        .mark_rule(color="#888", strokeDash=[4, 3])
        .encode(x="ratio:Q")
    )
    dots = (
        alt.Chart(d)
        .mark_point(size=90, filled=True)
        .encode(
            x=alt.X("ratio:Q", title=f["x"], scale=alt.Scale(type="log", domain=domain, nice=False)),
            y=y,
            yOffset=alt.YOffset("run_zh:N", sort=sorted(set(d["run_zh"]))),
            color=_color("run_zh", f["color"], d["run_zh"]),
            tooltip=["run:N", "quantity:N", "predicted:Q", "measured:Q", "ratio:Q"],
        )
    )
    return alt.layer(one, dots).properties(
        width=WIDTH, height=max(HEIGHT // 2, 50 * len(quantities)), title=f["title"]
    )


# --- issue #15: controlled experiments ---------------------------------------------------------------------


def _experiment_lines(df: pd.DataFrame, experiment: str, name: str) -> Drawn:
    """One experiment's arms: p50 ITL per point, colour = arm (the knob's setting), dash = repeat, a line per
    run; a panel per weight format (a sweep over concurrency) or per concurrency (a length sweep over the
    input length), so no line joins different tests or formats."""
    f = _fig(name)
    d = df[df["experiment"] == experiment].dropna(subset=["p50_itl_ms"])
    if not len(d):
        return Missing("no_rows", f"no points of experiment {experiment}")
    sweep = set(d["test_kind"]) <= set(SWEEP_KINDS)
    d = d.assign(
        variant_zh=d["variant"].map(lambda v: zh.EXPERIMENT_VARIANTS.get(v, v)),
        repeat_zh=d["repeat"].map(lambda k: f["repeat"].format(k=int(k))),
        panel_zh=(
            d["weight_format"].map(lambda w: f["panel"].format(v=zh.format_label(w)))
            if sweep
            else d["concurrency"].map(lambda c: f["panel"].format(v=int(c)))
        ),
    )
    if "gate_ok" in d:
        d["gate_zh"] = d["gate_ok"].map(lambda g: zh.GATE_LEGEND[bool(g)])
    repeats = sorted(set(d["repeat_zh"]))
    dash = (
        alt.StrokeDash(
            "repeat_zh:N",
            title=f["dash"],
            sort=repeats,
            scale=alt.Scale(domain=repeats, range=list(ROUND_DASHES[: len(repeats)])),
        )
        if len(repeats) > 1
        else None
    )
    x = (
        _conc_x(d["concurrency"], f["x"])
        if sweep
        else alt.X(
            "input_len_tokens:Q",
            title=f["x"],
            scale=alt.Scale(type="log", base=2, nice=False, padding=8),
            axis=alt.Axis(values=sorted({int(v) for v in d["input_len_tokens"]}), format="d"),
        )
    )
    # the labels' order: the baseline arm first
    order = [lab for v, lab in zh.EXPERIMENT_VARIANTS.items() if v in set(d["variant"])]
    order += sorted(set(d["variant_zh"]) - set(order))
    base = alt.Chart().encode(
        **_enc(
            x=x,
            # sweeps span 4 to 70 ms: log; a length sweep's arms sit within 2x: linear, not from 0
            y=alt.Y(
                "p50_itl_ms:Q",
                title=f["y"],
                scale=alt.Scale(type="log", nice=False, padding=8) if sweep else alt.Scale(zero=False),
            ),
            color=alt.Color("variant_zh:N", title=f["color"], sort=order, scale=alt.Scale(domain=order)),
            strokeDash=dash,
            detail=alt.Detail("run:N"),
            tooltip=["run:N", "concurrency:Q", "input_len_tokens:Q", "p50_itl_ms:Q"],
        )
    )
    # the panel with the most runs (the repeated arms) first
    runs = d.groupby("panel_zh")["run"].nunique()
    panels = sorted(runs.index, key=lambda p: (-runs[p], p))
    return (
        _lines_and_points(base, d)
        .properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
        .facet(data=d, column=alt.Column("panel_zh:N", title=None, sort=panels), title=f["title"])
        .resolve_scale(y="shared" if sweep else "independent")
    )


def experiment_slots(df: pd.DataFrame) -> Drawn:
    return _experiment_lines(df, "slots", "experiment_slots")


def experiment_sampling(df: pd.DataFrame) -> Drawn:
    return _experiment_lines(df, "sampling", "experiment_sampling")


def experiment_graphs(df: pd.DataFrame) -> Drawn:
    return _experiment_lines(df, "graphs", "experiment_graphs")


def experiment_kv_quant(df: pd.DataFrame) -> Drawn:
    return _experiment_lines(df, "kv_quant", "experiment_kv_quant")


def experiment_kv_pool(df: pd.DataFrame) -> Drawn:
    """Experiment 6: preemptions (left) and the requests resident at the wave's peak (right) against KV demand
    ÷ pool, the lock-step prediction as a line, each run as a dot, and (right) the log's max-concurrency
    line."""
    f = _fig("experiment_kv_pool")
    d = df.dropna(subset=["demand_over_pool"])
    if not len(d):
        return Missing("no_rows", "no runs of experiment kv_pool")
    rows = []
    for _, r in d.iterrows():
        base = {"demand_over_pool": r["demand_over_pool"], "run": r["run"], "test_kind": r["test_kind"]}
        for panel, pred, meas, log in (
            ("preemptions", "preemptions_predicted", "preemptions", None),
            ("residents", "residents_predicted", "residents", "log_max_concurrency"),
        ):
            for series, col in (("predicted", pred), ("measured", meas), ("log", log)):
                if col is not None and not _blank(r[col]):
                    rows.append({**base, "panel": panel, "series": series, "value": float(r[col])})
    long = pd.DataFrame(rows)
    long["series_zh"] = long["series"].map(lambda x: f[x])
    order = [f[x] for x in ("predicted", "measured", "log") if x in set(long["series"])]
    color = alt.Color("series_zh:N", title=f["color"], sort=order, scale=alt.Scale(domain=order))
    x = alt.X("demand_over_pool:Q", title=f["x"], scale=alt.Scale(zero=False, padding=12))
    panels = []
    for panel in ("preemptions", "residents"):
        sub = long[long["panel"] == panel]
        if not len(sub):
            continue
        y = alt.Y("value:Q", title=f[f"y_{panel}"], scale=alt.Scale(zero=True))
        # a prediction exists only at the pool sizes run: rings there, the measured runs as dots inside them;
        # the log's max concurrency (pool ÷ tokens per request) is a line
        rings = (
            alt.Chart(sub[sub["series"] == "predicted"].drop_duplicates(["demand_over_pool"]))
            .mark_point(size=220, filled=False, strokeWidth=2)
            .encode(x=x, y=y, color=color)
        )
        dots = (
            alt.Chart(sub[sub["series"] == "measured"])
            .mark_point(size=60, filled=True)
            .encode(x=x, y=y, color=color, tooltip=["run:N", "demand_over_pool:Q", "value:Q"])
        )
        layers = [rings, dots]
        if (sub["series"] == "log").any():
            layers.append(
                alt.Chart(sub[sub["series"] == "log"].drop_duplicates(["demand_over_pool"]))
                .mark_line(strokeDash=[6, 3])
                .encode(x=x, y=y, color=color)
            )
        panels.append(alt.layer(*layers).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT))
    return alt.hconcat(*panels, title=f["title"])


def experiment_model_size(df: pd.DataFrame) -> Drawn:
    """Experiment 4: left, mean p50 ITL against the weight bytes per step, a dot per size, the least-squares
    line a + bytes ÷ bw_eff (solid) and the bandwidth floor (dashed) per format; right, the floor's share of
    the step (achievement) against the parameter count. Colour = weight format; two panels, no more."""
    f = _fig("experiment_model_size")
    d = df.dropna(subset=["p50_itl_ms", "weight_gb_per_step"])
    if not len(d):
        return Missing("no_rows", "no sizes of experiment model_size")
    d = d.assign(
        format_zh=d["weight_format"].map(zh.format_label),
        params_b=d["params"] / 1e9,
    )
    order = list(dict.fromkeys(d["format_zh"]))
    color = alt.Color("format_zh:N", title=f["color"], sort=order, scale=alt.Scale(domain=order))
    lines = []
    for kind, col in (("fit", "fit_itl_ms"), ("floor", "floor_ms")):
        if col in d:
            part = d.dropna(subset=[col])
            lines.append(part.assign(line_zh=f[kind], y=part[col]))
    long = pd.concat(lines) if lines else pd.DataFrame()
    kinds = [f[k] for k in ("fit", "floor")]
    x = alt.X("weight_gb_per_step:Q", title=f["x_bytes"], scale=alt.Scale(zero=True))
    y = alt.Y("y:Q", title=f["y_itl"], scale=alt.Scale(zero=True))
    left_layers = [
        alt.Chart(long)
        .mark_line()
        .encode(
            x=x,
            y=y,
            color=color,
            strokeDash=alt.StrokeDash(
                "line_zh:N",
                title=f["line"],
                sort=kinds,
                scale=alt.Scale(domain=kinds, range=[[1, 0], [6, 3]]),
            ),
            detail=alt.Detail("weight_format:N"),
        ),
        alt.Chart(d.assign(y=d["p50_itl_ms"]))
        .mark_point(filled=True, size=60)
        .encode(
            x=x, y=y, color=color, tooltip=["arm:N", "weight_gb_per_step:Q", "p50_itl_ms:Q", "floor_ms:Q"]
        ),
    ]
    left = alt.layer(*left_layers).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    right = (
        alt.Chart(d.dropna(subset=["achievement_pct", "params_b"]))
        .mark_line(point=True)
        .encode(
            x=alt.X("params_b:Q", title=f["x_params"], scale=alt.Scale(type="log", nice=False, padding=8)),
            y=alt.Y("achievement_pct:Q", title=f["y_achievement"], scale=alt.Scale(domain=[0, 100])),
            color=color,
            tooltip=["arm:N", "params_b:Q", "achievement_pct:Q"],
        )
        .properties(width=PANEL_WIDTH, height=PANEL_HEIGHT)
    )
    return alt.hconcat(left, right, title=f["title"])


# figure name -> (table it draws, function)
# --- rate sweeps (issue #14) ---------------------------------------------------------------------------

RATE_LATENCIES = ("ttft", "itl", "e2e")  # analysis.reconcile.rates' columns <stat>_<metric>_ms
RATE_STATS = ("p50", "p99")


def _rate_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rate points with their Chinese series name (engine and format; the run added where two runs share
    one)."""
    d = _labelled(df.dropna(subset=["request_rate_req_s"]))
    if len(d):
        d["series_zh"] = _distinct(d, "engine_zh", "run")
    return d


def _rate_x(values: pd.Series, title: str) -> alt.X:
    """The plan's offered rate on a log axis, ticks at the rates measured."""
    ticks = sorted({float(v) for v in values.dropna()})
    return alt.X(
        "request_rate_req_s:Q",
        title=title,
        scale=alt.Scale(type="log", nice=False, padding=8),
        axis=alt.Axis(values=ticks, format="~g"),
    )


def rate_throughput(df: pd.DataFrame) -> Drawn:
    """Small multiples over the offered rate (req/s, log x): the achieved request rate with the line
    achieved = offered (a server that keeps up lies on it), output tokens/s, and goodput; a line per run."""
    f = _fig("rate_throughput")
    d = _rate_rows(df)
    if not len(d):
        return _no_rows("rate_points")
    x = _rate_x(d["request_rate_req_s"], f["x"])
    color = _color("series_zh", f["color"], d["series_zh"])
    panels = []
    for col, title in (
        ("achieved_rate_req_s", f["y_rate"]),
        ("output_throughput_tok_s", f["y_tok"]),
        ("goodput_req_s", f["y_goodput"]),
    ):
        sub = d.dropna(subset=[col])
        if not len(sub):
            continue
        base = alt.Chart(sub).encode(x=x, y=alt.Y(f"{col}:Q", title=title), color=color)
        layer = _lines_and_points(base, sub)
        if col == "achieved_rate_req_s":
            rates = sorted({float(v) for v in d["request_rate_req_s"]})
            diag = pd.DataFrame(
                {
                    "request_rate_req_s": rates,
                    col: rates,
                    "what": f["diag"],
                    "test_kind": d["test_kind"].iloc[0],
                }
            )
            ref = (
                alt.Chart(diag)
                .mark_line(strokeDash=[4, 3], color=OTHER_COLOR)
                .encode(x=x, y=alt.Y(f"{col}:Q"), detail="what:N")
            )
            layer = alt.LayerChart(layer=[ref, layer])  # no facet channels to hoist
        panels.append(layer.properties(width=220, height=PANEL_HEIGHT))
    return alt.hconcat(*panels, title=f["title"])


def rate_latency(df: pd.DataFrame) -> Drawn:
    """A panel per latency (TTFT, ITL, E2E; ms, log y) over the offered rate (req/s, log x): p50 solid, p99
    dashed, a colour per run."""
    f = _fig("rate_latency")
    d = _rate_rows(df)
    if not len(d):
        return _no_rows("rate_points")
    cols = [f"{s}_{m}_ms" for m in RATE_LATENCIES for s in RATE_STATS if f"{s}_{m}_ms" in d]
    ids = ["request_rate_req_s", "series_zh", "gate_ok", "test_kind"]  # a line's rows say their test
    long = d.melt(id_vars=ids, value_vars=cols, var_name="col", value_name="value_ms")
    long = long.dropna(subset=["value_ms"])
    long = long[long["value_ms"] > 0]  # a log axis
    if not len(long):
        return Missing("no_rows", "rate_points has no latency percentile above 0 ms")
    long["stat"] = long["col"].str.split("_").str[0]
    long["metric"] = long["col"].str.split("_").str[1]
    long["stat_zh"] = long["stat"].map(lambda s: zh.PERCENTILES.get(s, s))
    stats = [zh.PERCENTILES.get(s, s) for s in RATE_STATS]
    x = _rate_x(d["request_rate_req_s"], f["x"])
    color = _color("series_zh", f["color"], d["series_zh"])
    dash = alt.StrokeDash(
        "stat_zh:N", title=f["dash"], sort=stats, scale=alt.Scale(domain=stats, range=[[1, 0], [6, 3]])
    )
    panels = []
    for m in RATE_LATENCIES:
        sub = long[long["metric"] == m]
        if not len(sub):
            continue
        base = alt.Chart(sub).encode(
            x=x,
            y=alt.Y("value_ms:Q", title=f[f"y_{m}"], scale=alt.Scale(type="log")),
            color=color,
            strokeDash=dash,
            detail="stat_zh:N",
        )
        panels.append(_lines_and_points(base, sub).properties(width=220, height=PANEL_HEIGHT))
    return alt.hconcat(*panels, title=f["title"])


FIGURES: dict[str, tuple[str, Callable[[pd.DataFrame], Drawn]]] = {
    "structure_params": ("structure_params", structure_params),
    "structure_attention_flops": ("structure_flops", structure_attention_flops),
    "concurrency_throughput": ("concurrency_throughput", concurrency_throughput),
    "concurrency_latency": ("concurrency_latency", concurrency_latency),
    "concurrency_utilization": ("concurrency_utilization", concurrency_utilization),
    "ttft_anatomy": ("ttft_anatomy", ttft_anatomy),
    "kv_fit": ("kv_fit", kv_fit),
    "overload_timeline": ("overload_timeline", overload_timeline),
    "engines_throughput": ("engines_points", engines_throughput),
    "engines_itl_roofline": ("engines_points", engines_itl_roofline),
    "selection_pareto": ("selection_curve", selection_pareto),
    "reproducibility_delta": ("reproducibility", reproducibility_delta),
    "roofline_itl_floor": ("roofline_points", roofline_itl_floor),
    "roofline_achievement": ("roofline_points", roofline_achievement),
    "prediction_vs_measured": ("prediction_vs_measured", prediction_vs_measured),
    "experiment_slots": ("experiment_points", experiment_slots),
    "experiment_sampling": ("experiment_points", experiment_sampling),
    "experiment_graphs": ("experiment_points", experiment_graphs),
    "experiment_kv_quant": ("experiment_points", experiment_kv_quant),
    "experiment_kv_pool": ("experiment_pool", experiment_kv_pool),
    "experiment_model_size": ("model_size_sizes", experiment_model_size),
    "rate_throughput": ("rate_points", rate_throughput),
    "rate_latency": ("rate_points", rate_latency),
}


# figures only a campaign of our own collector gets (per-run series, measured ceilings, prediction.json)
OWN_CAMPAIGN_FIGURES = ("roofline_itl_floor", "roofline_achievement", "prediction_vs_measured")


def _build(
    tables: dict[str, pd.DataFrame], registry: dict[str, tuple[str, Callable[[pd.DataFrame], Drawn]]]
) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
    specs: dict[str, dict] = {}
    missing: dict[str, dict[str, str]] = {}
    for name, (table, fn) in registry.items():
        df = tables.get(table)
        drawn = _no_rows(table) if df is None or not len(df) else fn(df)
        if isinstance(drawn, Missing):
            missing[name] = drawn.to_obj()
        else:
            specs[name] = drawn.to_dict()
    return specs, missing


def figure_specs(tables: dict[str, pd.DataFrame]) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
    """Vega-Lite specs (dicts) of every figure that has something to draw, and for each other figure why not
    ({"reason": labels_zh.REASONS code, "detail": ...})."""
    return _build(tables, FIGURES)


def all_figures(tables: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """Vega-Lite specs of every figure that has something to draw (see figure_specs for the others'
    reasons)."""
    return figure_specs(tables)[0]


# --- cross-campaign comparison (out/_comparison/) ----------------------------------------------------------


def _gpu_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of campaigns measured on a GPU with a datasheet: a CPU smoke campaign has no place on GPU
    axes."""
    if "bandwidth_datasheet_bytes_per_s" not in df:
        return df.iloc[0:0]
    with_gpu = df.groupby("campaign")["bandwidth_datasheet_bytes_per_s"].transform(lambda s: s.notna().any())
    return df[with_gpu.astype(bool)]


def _gpu_zh(gpu: object) -> str:
    spec = gpus.GPUS.get(str(gpu))
    return spec.display_name.removeprefix("NVIDIA ") if spec is not None else str(gpu)


def _campaign_series(df: pd.DataFrame) -> pd.DataFrame:
    d = _labelled(_sweeps(_gpu_rows(df)))
    if not len(d):
        return d
    d["panel_zh"] = [_gpu_zh(g) for g in d["gpu"]]
    # two campaigns on one GPU model: the campaign's name tells them apart
    per_panel = d.groupby("panel_zh")["campaign"].nunique()
    d["panel_zh"] = [
        f"{p} · {c}" if per_panel[p] > 1 else p for p, c in zip(d["panel_zh"], d["campaign"], strict=True)
    ]
    d["line_zh"] = d["engine_zh"]
    return d


def _gpu_columns(layer: alt.LayerChart, long: pd.DataFrame, title: str) -> alt.TopLevelMixin:
    order = sorted(set(long["panel_zh"]))
    return layer.properties(width=PANEL_WIDTH, height=260).facet(
        data=long, column=alt.Column("panel_zh:N", title=None, sort=order), title=title
    )


def _no_gpu() -> Missing:
    return Missing("no_gpu_datasheet", "no campaign with a GPU datasheet: nothing to compare on GPU axes")


def comparison_itl_floor(df: pd.DataFrame) -> Drawn:
    f = _fig("comparison_itl_floor")
    d = _campaign_series(df)
    if not len(d) or not _has_floor(d):
        return _no_gpu()
    layer, long = _itl_floor_layer(d, f, _color("line_zh", f["color"], d["line_zh"]))
    return _gpu_columns(layer, long, f["title"])


def comparison_achievement(df: pd.DataFrame) -> Drawn:
    f = _fig("comparison_achievement")
    d = _campaign_series(df)
    if not len(d) or not _present(d, "achievement_datasheet_pct", "achievement_measured_pct"):
        return _no_gpu()
    layer, long = _achievement_layer(d, f, _color("line_zh", f["color"], d["line_zh"]))
    return _gpu_columns(layer, long, f["title"])


def comparison_throughput(df: pd.DataFrame) -> Drawn:
    """One panel: colour = engine series, dash = GPU (a line per campaign × series)."""
    f = _fig("comparison_throughput")
    d = _campaign_series(df)
    if not len(d):
        return _no_gpu()
    d = d.dropna(subset=["output_throughput_tokens_per_s"])
    panels = sorted(set(d["panel_zh"]))
    base = alt.Chart(d, title=f["title"]).encode(
        x=_conc_x(d["concurrency"], f["x"]),
        y=alt.Y("output_throughput_tokens_per_s:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=_color("line_zh", f["color"], d["line_zh"]),
        strokeDash=alt.StrokeDash(
            "panel_zh:N",
            title=f["dash"],
            sort=panels,
            scale=alt.Scale(domain=panels, range=list(ROUND_DASHES[: len(panels)])),
        ),
        detail=alt.Detail("campaign:N"),
    )
    return _lines_and_points(base, d, size=40).properties(width=WIDTH, height=HEIGHT)


COMPARISON_FIGURES: dict[str, tuple[str, Callable[[pd.DataFrame], Drawn]]] = {
    "comparison_itl_floor": ("comparison_roofline", comparison_itl_floor),
    "comparison_achievement": ("comparison_roofline", comparison_achievement),
    "comparison_throughput": ("comparison_roofline", comparison_throughput),
}


def comparison_figure_specs(
    tables: dict[str, pd.DataFrame],
) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
    """Vega-Lite specs of the cross-campaign figures that have something to draw, and why the others do
    not."""
    return _build(tables, COMPARISON_FIGURES)


def comparison_figures(tables: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """Vega-Lite specs of the cross-campaign figures that have something to draw."""
    return comparison_figure_specs(tables)[0]
