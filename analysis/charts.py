"""One function per figure: a tidy table in, an Altair chart out. No statistics here: every number a
chart draws is a column the reconciliations computed. Titles and axis titles come from labels_zh.

Gated-out points are never dropped: they are drawn as crosses (or faded bars) under a legend entry that
says they failed a self-check and were kept (labels_zh.GATE_LEGEND).
"""

from __future__ import annotations

from collections.abc import Callable

import altair as alt
import pandas as pd

from analysis import labels_zh as zh

WIDTH = 560
HEIGHT = 320


def engine_format_zh(engine: str, weight_format: object) -> str:
    """A series' Chinese name from its own row: `llama.cpp（F16）`; the bare engine name where the table does not
    say which weight format the engine served (never a format assumed from another campaign)."""
    name = zh.ENGINE_NAMES.get(engine, engine)
    if (
        weight_format is None
        or (isinstance(weight_format, float) and weight_format != weight_format)
        or weight_format == ""
    ):
        return name
    fmt = str(weight_format)
    return f"{name}（{zh.WEIGHT_FORMATS.get(fmt, fmt.upper())}）"


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Chinese display columns for engine/round/gate (a lookup, not a statistic)."""
    out = df.copy()
    if "engine" in out:
        fmts = out["weight_format"] if "weight_format" in out else [None] * len(out)
        out["engine_zh"] = [engine_format_zh(e, f) for e, f in zip(out["engine"], fmts, strict=True)]
    if "round" in out:
        out["round_zh"] = out["round"].map(lambda r: zh.ROUNDS.get(r, r))
    if "gate_ok" in out:
        out["gate_zh"] = out["gate_ok"].map(lambda g: zh.GATE_LEGEND[bool(g)])
    if "engine_zh" in out and "round_zh" in out:
        # a campaign of our own has no rounds: the series is the engine and its format alone
        out["series_zh"] = [
            f"{r} · {e}" if r else e for r, e in zip(out["round_zh"], out["engine_zh"], strict=True)
        ]
    return out


def _distinct_series_zh(d: pd.DataFrame, key: str) -> list[str]:
    """One legend label per series: its Chinese name (``series_zh``), with the ``key`` column's value added only
    where two different series would otherwise share a name (two runs of one engine and format)."""
    keys_per_label = d.groupby("series_zh")[key].nunique()
    return [f"{s} · {k}" if keys_per_label[s] > 1 else s for s, k in zip(d["series_zh"], d[key], strict=True)]


def _dash_scale(shown: pd.Series, measured: str, *floors: str) -> alt.Scale:
    """Measured lines solid, floors dashed (each floor its own dash); the legend lists only what ``shown`` has
    (a CPU campaign has no floor to draw)."""
    dashes = {measured: [1, 0], **dict(zip(floors, ([6, 3], [2, 2], [8, 3, 2, 3]), strict=False))}
    present = set(shown)
    domain = [k for k in dashes if k in present]
    return alt.Scale(domain=domain, range=[dashes[k] for k in domain])


def _present(df: pd.DataFrame, *cols: str) -> list[str]:
    """The value columns a table actually has (a campaign without theory or counters lacks some)."""
    return [c for c in cols if c in df.columns]


def _fig(name: str) -> dict[str, str]:
    return zh.FIGURES[name]


def _gate_shape() -> alt.Shape:
    return alt.Shape(
        "gate_zh:N",
        title=zh.COLUMNS["gate_ok"],
        scale=alt.Scale(domain=[zh.GATE_LEGEND[True], zh.GATE_LEGEND[False]], range=["circle", "cross"]),
    )


def structure_params(df: pd.DataFrame) -> alt.Chart:
    f = _fig("structure_params")
    d = df.assign(
        params_b=df["params"] / 1e9, component_zh=df["group"].map(lambda g: zh.COMPONENTS.get(g, g))
    )
    return (
        alt.Chart(d, title=f["title"])
        .mark_bar()
        .encode(
            x=alt.X("sum(params_b):Q", title=f["x"]),
            y=alt.Y("component_zh:N", title=f["y"], sort="-x"),
            tooltip=["component:N", "params:Q", "share_pct:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def structure_attention_flops(df: pd.DataFrame) -> alt.Chart:
    f = _fig("structure_attention_flops")
    d = df.assign(part_zh=df["part"].map(lambda p: zh.COMPONENTS.get(p, p)))
    return (
        alt.Chart(d, title=f["title"])
        .mark_line(point=True)
        .encode(
            x=alt.X("seq_len_tokens:Q", title=f["x"], scale=alt.Scale(type="log")),
            y=alt.Y("gflop_per_token:Q", title=f["y"], scale=alt.Scale(type="log")),
            color=alt.Color("part_zh:N", title=f["color"]),
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def concurrency_throughput(df: pd.DataFrame) -> alt.Chart:
    f = _fig("concurrency_throughput")
    d = _labelled(df)
    d["kind_zh"] = d["series"].map(lambda s: zh.SERIES.get(s, s))
    d["line_zh"] = d["series_zh"] + " · " + d["kind_zh"] + " · " + d["test"]
    base = alt.Chart(d, title=f["title"]).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("tokens_per_s:Q", title=f["y"]),
        color=alt.Color("line_zh:N", title=f["color"]),
    )
    return (base.mark_line() + base.mark_point(size=60).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


def concurrency_latency(df: pd.DataFrame) -> alt.Chart:
    f = _fig("concurrency_latency")
    d = _labelled(df[df["stat"].isin(["p50", "p90", "p99"])])
    d["metric_zh"] = d["metric"].map(lambda m: zh.COLUMNS.get(f"{m}_ms", m))
    d["line_zh"] = d["series_zh"] + " · " + d["test"] + " · " + d["stat"]
    base = alt.Chart(d).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("value_ms:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=alt.Color("line_zh:N", title=f["color"]),
    )
    layer = base.mark_line() + base.mark_point(size=40).encode(shape=_gate_shape())
    return layer.properties(width=260, height=200).facet(
        facet=alt.Facet("metric_zh:N", title=None), columns=2, title=f["title"]
    )


def concurrency_utilization(df: pd.DataFrame) -> alt.Chart:
    f = _fig("concurrency_utilization")
    d = _labelled(df)
    long = d.melt(
        id_vars=["concurrency", "series_zh", "gate_zh", "test"],
        value_vars=_present(d, "mfu_pct", "mbu_pct"),
        var_name="metric",
        value_name="pct",
    ).dropna(subset=["pct"])
    long["metric_zh"] = long["metric"].map(lambda m: zh.SERIES[m.removesuffix("_pct")])
    base = alt.Chart(long, title=f["title"]).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("pct:Q", title=f["y"]),
        color=alt.Color("metric_zh:N", title=f["color"]),
    )
    return (base.mark_line() + base.mark_point(size=60).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


def ttft_anatomy(df: pd.DataFrame) -> alt.Chart:
    f = _fig("ttft_anatomy")
    d = _labelled(df)
    d["part_zh"] = d["part"].map(lambda p: zh.TTFT_PARTS.get(p, p))
    d["point_zh"] = [
        " · ".join(x for x in (r, t, pt) if x)
        for r, t, pt in zip(d["round_zh"], d["test"], d["point"], strict=True)
    ]
    return (
        alt.Chart(d, title=f["title"])
        .mark_bar()
        .encode(
            x=alt.X("point_zh:N", title=f["x"], sort=None),
            y=alt.Y("ms:Q", title=f["y"], stack="zero"),
            color=alt.Color("part_zh:N", title=f["color"]),
            opacity=alt.Opacity(
                "gate_zh:N",
                title=zh.COLUMNS["gate_ok"],
                scale=alt.Scale(domain=[zh.GATE_LEGEND[True], zh.GATE_LEGEND[False]], range=[1.0, 0.4]),
            ),
            tooltip=["point_zh:N", "part_zh:N", "ms:Q", "share_pct:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def kv_fit(df: pd.DataFrame) -> alt.Chart:
    f = _fig("kv_fit")
    d = _labelled(df)
    pts = (
        alt.Chart(d, title=f["title"])
        .mark_point(size=80, filled=True)
        .encode(
            x=alt.X("tokens_in_flight:Q", title=f["x"]),
            y=alt.Y("peak_kv_usage_tokens:Q", title=f["y"]),
            color=alt.Color("round_zh:N", title=zh.COLUMNS["round"]),
            shape=_gate_shape(),
            tooltip=["point:N", "tokens_in_flight:Q", "peak_kv_usage_tokens:Q"],
        )
    )
    line = (
        alt.Chart(d)
        .mark_line(strokeDash=[4, 3])
        .encode(
            x="tokens_in_flight:Q", y="fit_tokens:Q", color=alt.Color("round_zh:N", title=zh.COLUMNS["round"])
        )
    )
    return (pts + line).properties(width=WIDTH, height=HEIGHT)


def overload_timeline(df: pd.DataFrame) -> alt.Chart:
    f = _fig("overload_timeline")
    d = _labelled(df)
    if "run" not in d:
        d["run"] = ""
    long = d.melt(
        id_vars=["round_zh", "run", "t_s"],
        value_vars=_present(d, "kv_usage_pct", "running", "waiting", "preemptions"),
        var_name="series",
        value_name="value",
    ).dropna(subset=["value"])
    several = d["run"].nunique() > 1  # a campaign of our own: one overload point per run
    if several:
        d["run_zh"] = _distinct_series_zh(d, "run")
        names = dict(zip(d["run"], d["run_zh"], strict=True))
    long["line_zh"] = [
        f"{names[r]} · {zh.SERIES.get(s, s)}" if several else zh.SERIES.get(s, s)
        for r, s in zip(long["run"], long["series"], strict=True)
    ]
    return (
        alt.Chart(long, title=f["title"])
        .mark_line()
        .encode(
            x=alt.X("t_s:Q", title=f["x"]),
            y=alt.Y("value:Q", title=f["y"]),
            color=alt.Color("line_zh:N", title=f["color"]),
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def engines_throughput(df: pd.DataFrame) -> alt.Chart:
    f = _fig("engines_throughput")
    d = _labelled(df)
    base = alt.Chart(d, title=f["title"]).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("output_throughput_tokens_per_s:Q", title=f["y"]),
        color=alt.Color("series_zh:N", title=f["color"]),
    )
    return (base.mark_line() + base.mark_point(size=60).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


def engines_itl_roofline(df: pd.DataFrame) -> alt.Chart:
    f = _fig("engines_itl_roofline")
    d = _labelled(df)
    long = d.melt(
        id_vars=["concurrency", "series_zh", "gate_zh"],
        value_vars=_present(d, "p50_itl_ms", "roofline_floor_ms"),
        var_name="what",
        value_name="ms",
    ).dropna(subset=["ms"])
    long["what_zh"] = long["what"].map(
        {"p50_itl_ms": zh.SERIES["measured_p50_itl"], "roofline_floor_ms": zh.SERIES["roofline_floor"]}
    )
    # a format's measured line and its floor share the series' colour; the floor is dashed
    base = alt.Chart(long, title=f["title"]).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("ms:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=alt.Color("series_zh:N", title=f["color"]),
        strokeDash=alt.StrokeDash(
            "what_zh:N",
            title=zh.COLUMNS["what"],
            scale=_dash_scale(long["what_zh"], zh.SERIES["measured_p50_itl"], zh.SERIES["roofline_floor"]),
        ),
    )
    return (base.mark_line() + base.mark_point(size=50).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


def selection_pareto(df: pd.DataFrame) -> alt.Chart:
    f = _fig("selection_pareto")
    d = _labelled(df)
    base = alt.Chart(d, title=f["title"]).encode(
        x=alt.X("p99_ttft_ms:Q", title=f["x"], scale=alt.Scale(type="log")),
        y=alt.Y("output_throughput_tokens_per_s:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=alt.Color("series_zh:N", title=f["color"]),
        tooltip=["series_zh:N", "concurrency:Q", "p99_ttft_ms:Q", "output_throughput_tokens_per_s:Q"],
    )
    line = base.transform_filter(alt.datum.on_front).mark_line()
    return (line + base.mark_point(size=60).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


def reproducibility_delta(df: pd.DataFrame) -> alt.Chart:
    f = _fig("reproducibility_delta")
    d = _labelled(df)
    d["line_zh"] = d["comparison"] + " · " + d["engine_zh"]
    return (
        alt.Chart(d, title=f["title"])
        .mark_bar()
        .encode(
            x=alt.X("concurrency:O", title=f["x"]),
            xOffset="line_zh:N",
            y=alt.Y("delta_pct:Q", title=f["y"]),
            color=alt.Color("line_zh:N", title=f["color"]),
            opacity=alt.Opacity(
                "gate_zh:N",
                title=zh.COLUMNS["gate_ok"],
                scale=alt.Scale(domain=[zh.GATE_LEGEND[True], zh.GATE_LEGEND[False]], range=[1.0, 0.4]),
            ),
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


def _series_label(df: pd.DataFrame) -> pd.DataFrame:
    d = _labelled(df)
    d["line_zh"] = _distinct_series_zh(d, "series")
    return d


def _itl_floor_chart(name: str, d: pd.DataFrame) -> alt.Chart:
    """Measured p50 ITL beside the datasheet and measured-ceiling floors, one line per labelled series."""
    f = _fig(name)
    long = d.melt(
        id_vars=["concurrency", "line_zh", "gate_zh"],
        value_vars=_present(d, "p50_itl_ms", "floor_datasheet_ms", "floor_measured_ms"),
        var_name="what",
        value_name="ms",
    ).dropna(subset=["ms"])
    long["what_zh"] = long["what"].map(
        {
            "p50_itl_ms": zh.SERIES["measured_p50_itl"],
            "floor_datasheet_ms": zh.SERIES["floor_datasheet"],
            "floor_measured_ms": zh.SERIES["floor_measured"],
        }
    )
    base = alt.Chart(long, title=f["title"]).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("ms:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=alt.Color("line_zh:N", title=f["color"]),
        strokeDash=alt.StrokeDash(
            "what_zh:N",
            title=zh.COLUMNS["what"],
            scale=_dash_scale(
                long["what_zh"],
                zh.SERIES["measured_p50_itl"],
                zh.SERIES["floor_datasheet"],
                zh.SERIES["floor_measured"],
            ),
        ),
    )
    return (base.mark_line() + base.mark_point(size=40).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


def _achievement_chart(name: str, d: pd.DataFrame) -> alt.Chart:
    """Roofline achievement against both bases (datasheet, measured ceiling), one line per labelled series."""
    f = _fig(name)
    long = d.melt(
        id_vars=["concurrency", "line_zh", "gate_zh"],
        value_vars=_present(d, "achievement_datasheet_pct", "achievement_measured_pct"),
        var_name="basis",
        value_name="pct",
    ).dropna(subset=["pct"])
    long["basis_zh"] = long["basis"].map(
        {
            "achievement_datasheet_pct": zh.SERIES["floor_datasheet"],
            "achievement_measured_pct": zh.SERIES["floor_measured"],
        }
    )
    base = alt.Chart(long, title=f["title"]).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("pct:Q", title=f["y"]),
        color=alt.Color("line_zh:N", title=f["color"]),
        strokeDash=alt.StrokeDash("basis_zh:N", title=zh.COLUMNS["basis"]),
    )
    return (base.mark_line() + base.mark_point(size=40).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


def roofline_itl_floor(df: pd.DataFrame) -> alt.Chart:
    return _itl_floor_chart("roofline_itl_floor", _series_label(df))


def roofline_achievement(df: pd.DataFrame) -> alt.Chart:
    return _achievement_chart("roofline_achievement", _series_label(df))


def prediction_vs_measured(df: pd.DataFrame) -> alt.Chart:
    f = _fig("prediction_vs_measured")
    d = df.dropna(subset=["ratio"]).assign(
        quantity_zh=lambda x: x["quantity"].map(lambda q: zh.QUANTITIES.get(q, q))
    )
    return (
        alt.Chart(d, title=f["title"])
        .mark_bar()
        .encode(
            x=alt.X("ratio:Q", title=f["x"], scale=alt.Scale(type="log")),
            y=alt.Y("quantity_zh:N", title=f["y"]),
            yOffset="run:N",
            color=alt.Color("run:N", title=f["color"]),
            tooltip=["run:N", "quantity:N", "predicted:Q", "measured:Q", "ratio:Q"],
        )
        .properties(width=WIDTH, height=HEIGHT)
    )


# figure name -> (table it draws, function)
FIGURES: dict[str, tuple[str, Callable[[pd.DataFrame], alt.TopLevelMixin]]] = {
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
}


# figures only a campaign of our own collector gets (per-run series, measured ceilings, prediction.json)
OWN_CAMPAIGN_FIGURES = ("roofline_itl_floor", "roofline_achievement", "prediction_vs_measured")


def all_figures(tables: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """Vega-Lite specs (dicts) of every figure whose table has rows; a figure with no data is left out."""
    out: dict[str, dict] = {}
    for name, (table, fn) in FIGURES.items():
        df = tables.get(table)
        if df is None or not len(df):
            continue
        out[name] = fn(df).to_dict()
    return out


# --- cross-campaign comparison (out/_comparison/) ----------------------------------------------------------


def _campaign_series(df: pd.DataFrame) -> pd.DataFrame:
    d = _labelled(df)
    d["line_zh"] = d["campaign"] + " · " + d["engine_zh"]
    return d


def comparison_itl_floor(df: pd.DataFrame) -> alt.Chart:
    return _itl_floor_chart("comparison_itl_floor", _campaign_series(df))


def comparison_achievement(df: pd.DataFrame) -> alt.Chart:
    return _achievement_chart("comparison_achievement", _campaign_series(df))


def comparison_throughput(df: pd.DataFrame) -> alt.Chart:
    f = _fig("comparison_throughput")
    d = _campaign_series(df)
    base = alt.Chart(d, title=f["title"]).encode(
        x=alt.X("concurrency:Q", title=f["x"], scale=alt.Scale(type="log", base=2)),
        y=alt.Y("output_throughput_tokens_per_s:Q", title=f["y"], scale=alt.Scale(type="log")),
        color=alt.Color("line_zh:N", title=f["color"]),
    )
    return (base.mark_line() + base.mark_point(size=40).encode(shape=_gate_shape())).properties(
        width=WIDTH, height=HEIGHT
    )


COMPARISON_FIGURES: dict[str, tuple[str, Callable[[pd.DataFrame], alt.TopLevelMixin]]] = {
    "comparison_itl_floor": ("comparison_roofline", comparison_itl_floor),
    "comparison_achievement": ("comparison_roofline", comparison_achievement),
    "comparison_throughput": ("comparison_roofline", comparison_throughput),
}


def comparison_figures(tables: dict[str, pd.DataFrame]) -> dict[str, dict]:
    """Vega-Lite specs of the cross-campaign figures whose table has rows."""
    out: dict[str, dict] = {}
    for name, (table, fn) in COMPARISON_FIGURES.items():
        df = tables.get(table)
        if df is None or not len(df):
            continue
        out[name] = fn(df).to_dict()
    return out
