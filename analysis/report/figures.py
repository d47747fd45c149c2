"""Vega-Lite specs → static SVG, at build time.

Why static SVG (vl-convert) rather than Vega JS in the browser: the pages are read where CDNs are slow or
blocked, and a static image needs no script at all — nothing to fetch, nothing to execute, it prints, it shows
in RSS readers and in the raw HTML. vl-convert embeds its own Vega/Vega-Lite (no network), and we forbid data
URLs (``allowed_base_urls=[]``) so a spec can only use the data inlined by the analysis.

Text in the SVG stays text (the browser draws it with the reader's fonts), but vl-convert lays the chart out
with its own font metrics: without a CJK font registered, Chinese titles are measured with a Latin fallback
and labels overlap. So we register the system's CJK fonts (Debian: fonts-noto-cjk) before the first
conversion.
"""

from __future__ import annotations

import copy
import csv
import functools
import io
import json
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.report.build_cache import SvgCache, spec_key
from collector.raw.errors import AnatomyError, ParseError

# Where Debian/Ubuntu put CJK fonts (fonts-noto-cjk, fonts-wqy-*); the first that exists is registered.
CJK_FONT_DIRS = (
    Path("/usr/share/fonts/opentype/noto"),
    Path("/usr/share/fonts/truetype/noto"),
    Path("/usr/share/fonts/truetype/wqy"),
    Path("/usr/share/fonts/opentype/source-han-sans"),
)
# Font stack written into every spec: the SVG names it, the reader's browser picks the first it has.
FONT_STACK = (
    '"Noto Sans CJK SC", "Source Han Sans SC", "PingFang SC", "Microsoft YaHei", "WenQuanYi '
    'Micro Hei", sans-serif'
)
_CJK = re.compile(r"[\u4e00-\u9fff]")
# right padding of every figure, px (vega's default is 5)
LEGEND_SLACK_PX = 24


class FigureError(AnatomyError):
    """A figure spec that cannot be published (no Chinese title, an axis without a title)."""


def cjk_font_dir() -> Path | None:
    """The first CJK font folder this machine has (None: figure text would be measured with a Latin font,
    narrower than the reader's browser draws Chinese, and legends would be cut off)."""
    return next((d for d in CJK_FONT_DIRS if d.is_dir() and any(d.iterdir())), None)


@functools.cache
def register_cjk_fonts() -> Path | None:
    """Register the first CJK font folder found with vl-convert; return it (None when there is none)."""
    import vl_convert as vlc

    d = cjk_font_dir()
    if d is not None:
        vlc.register_font_directory(str(d))
    return d


def load_spec(path: Path) -> dict[str, Any]:
    try:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ParseError(path, err.lineno, f"figure spec is not JSON ({err.msg})") from err
    if not isinstance(spec, dict):
        raise ParseError(path, 1, "figure spec is not a JSON object")
    return spec


def spec_title(spec: dict[str, Any]) -> str:
    t = spec.get("title")
    if isinstance(t, dict):
        t = t.get("text")
    if isinstance(t, list):
        t = " ".join(str(x) for x in t)
    return str(t or "")


def _encodings(spec: dict[str, Any]):
    """Every (channel, encoding) of the spec, layers/concats/facets included."""
    enc = spec.get("encoding")
    if isinstance(enc, dict):
        for ch, e in enc.items():
            if isinstance(e, dict):
                yield ch, e
    for key in ("layer", "hconcat", "vconcat", "concat"):
        for sub in spec.get(key, []) or []:
            if isinstance(sub, dict):
                yield from _encodings(sub)
    if isinstance(spec.get("spec"), dict):
        yield from _encodings(spec["spec"])


def check_publishable(spec: dict[str, Any], name: str) -> list[str]:
    """Problems that keep a figure off the site: a non-Chinese title, a positional axis without a title.

    An x/y encoding counts as titled when any encoding of that channel in the spec has a non-empty title
    (layers share axes), or when the axis is switched off.
    """
    problems = []
    if not _CJK.search(spec_title(spec)):
        problems.append(f"{name}: the chart has no Chinese title (title={spec_title(spec)!r})")
    titled: dict[str, bool] = {}
    for ch, e in _encodings(spec):
        if ch not in ("x", "y") or "field" not in e and "aggregate" not in e:
            continue
        axis = e.get("axis", {})
        ok = bool(e.get("title")) or axis is None or (isinstance(axis, dict) and bool(axis.get("title")))
        titled[ch] = titled.get(ch, False) or ok
    for ch, ok in sorted(titled.items()):
        if not ok:
            problems.append(f"{name}: the {ch} axis has no title (give it one, with the unit)")
    return problems


def prepare_spec(spec: dict[str, Any], title: str | None = None) -> dict[str, Any]:
    """A copy of the spec with the page's font stack (and the page's title when one is given)."""
    spec = copy.deepcopy(spec)
    if title:
        old = spec.get("title")
        spec["title"] = {**old, "text": title} if isinstance(old, dict) else title
    config = spec.setdefault("config", {})
    config.setdefault("font", FONT_STACK)
    config.setdefault("background", "white")
    # Chinese legend labels are long ("第二轮 · llama.cpp（Q4_K_M） · 带宽下限"): do not cut them off.
    config.setdefault("legend", {}).setdefault("labelLimit", 360)
    # room on the right for a reader whose fonts draw the Latin parts of a legend label wider than the build
    # machine's (the SVG is an image: text past its edge is cut, never wrapped)
    spec.setdefault("padding", {"left": 5, "top": 5, "bottom": 5, "right": LEGEND_SLACK_PX})
    return spec


def spec_to_svg(spec: dict[str, Any]) -> str:
    """Render with vl-convert: zh-CN number locale (thousands separators), no external data."""
    import vl_convert as vlc

    register_cjk_fonts()
    svg = vlc.vegalite_to_svg(spec, format_locale="zh-CN", allowed_base_urls=[])
    if "<svg" not in svg or ("<path" not in svg and "<text" not in svg):
        raise FigureError("vl-convert returned an empty SVG")
    return svg


# Converting in worker processes costs ~1 s a worker (Python, vl-convert, fonts): only for many figures.
PER_WORKER_MIN = 12


def convert_all(specs: list[dict[str, Any]]) -> list[str]:
    """Specs → SVGs, in order. vl-convert holds the GIL for ~0.3 s a figure, so a site of a few campaigns (40+
    figures) is converted in worker processes, one per core (spawned: the converter runs threads of its own,
    which a fork would not carry over safely)."""
    workers = min(os.cpu_count() or 1, 4, max(1, len(specs) // PER_WORKER_MIN))
    if workers > 1:
        try:
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                return list(pool.map(spec_to_svg, specs))
        except BrokenProcessPool:
            pass  # a caller whose __main__ a spawned worker cannot re-import (python -c, stdin): do it here
    return [spec_to_svg(spec) for spec in specs]


@functools.cache
def converter_identity() -> str:
    """What besides the spec decides the SVG: vl-convert's version and the CJK fonts it measures text with
    (their folder, and each file's name and size)."""
    from importlib import metadata

    d = register_cjk_fonts()
    fonts = sorted((p.name, p.stat().st_size) for p in d.rglob("*") if p.is_file()) if d else []
    return json.dumps([metadata.version("vl-convert-python"), str(d), fonts])


def convert_unique(specs: list[dict[str, Any]], cache: SvgCache | None = None) -> list[str]:
    """Specs → SVGs, in order, each distinct spec converted once (two pages may show the same figure) and
    only when ``cache`` does not hold it already."""
    converter = converter_identity()
    keys = [spec_key(spec, converter) for spec in specs]
    svgs: dict[str, str] = {}
    if cache is not None:
        for key in dict.fromkeys(keys):
            if (svg := cache.get(key)) is not None:
                svgs[key] = svg
    todo = {key: spec for key, spec in zip(keys, specs, strict=True) if key not in svgs}
    for key, svg in zip(todo, convert_all(list(todo.values())), strict=True):
        svgs[key] = svg
        if cache is not None:
            cache.put(key, svg)
    return [svgs[key] for key in keys]


@dataclass
class FigureSet:
    """The figures the pages show: each spec checked and placed once (``<page dir>/figures/<name>.svg``),
    converted together at the end; and the figures a page deliberately leaves out, with why."""

    written: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (campaign, name, svg) -> svg
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # svg path (relative to docs) -> spec
    left_out: dict[str, dict[str, str]] = field(default_factory=dict)  # campaign -> figure -> why

    def place(self, campaign: str, name: str, spec_path: Path, page_path: str, title: str | None) -> str:
        """The SVG's path relative to docs_dir; the spec is checked now and converted with the rest."""
        page_dir = Path(page_path).parent
        # Pages of several campaigns share a folder (structure/): there each campaign gets its own sub-folder.
        mine = page_dir.parts[-1:] == (campaign,)
        folder = page_dir / "figures" if mine else page_dir / "figures" / campaign
        svg_rel = (folder / (name.replace("/", "--") + ".svg")).as_posix()
        key = (campaign, name, svg_rel)
        if key not in self.written:
            spec = prepare_spec(load_spec(spec_path), title)
            problems = check_publishable(spec, f"{campaign}/{name}")
            if problems:
                raise FigureError("; ".join(problems))
            self.pending[svg_rel] = spec
            self.written[key] = svg_rel
        return svg_rel

    def shown(self, campaign: str) -> set[str]:
        return {k[1] for k in self.written if k[0] == campaign}

    def convert(self, out_dir: Path, cache: SvgCache | None = None) -> list[str]:
        """Write every pending figure under ``out_dir`` with its downloads beside it (the points it draws as
        CSV, its spec as Vega-Lite JSON: ``downloads_of``); return the SVGs' paths. ``cache``: figures
        converted by earlier builds."""
        jobs = sorted(self.pending.items())
        svgs = convert_unique([spec for _, spec in jobs], cache)
        for (rel, spec), svg in zip(jobs, svgs, strict=True):
            target = out_dir / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(svg, encoding="utf-8")
            csv_rel, spec_rel = downloads_of(rel)
            (out_dir / csv_rel).write_text(figure_csv(spec), encoding="utf-8")
            (out_dir / spec_rel).write_text(json.dumps(spec, ensure_ascii=False, indent=1), encoding="utf-8")
        self.pending.clear()
        return [rel for rel, _ in jobs]


def downloads_of(svg_rel: str) -> tuple[str, str]:
    """The paths (relative to docs) of a figure's data CSV and spec JSON: beside its SVG, same stem."""
    stem = svg_rel[: -len(".svg")] if svg_rel.endswith(".svg") else svg_rel
    return f"{stem}.csv", f"{stem}.vl.json"


def figure_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every data row a spec carries (its inline ``datasets`` and ``data.values``), in order; with more than
    one dataset each row says which (column ``dataset``: 1, 2, …)."""
    sets = [rows for rows in (spec.get("datasets") or {}).values() if isinstance(rows, list)]
    values = (spec.get("data") or {}).get("values") if isinstance(spec.get("data"), dict) else None
    if isinstance(values, list):
        sets.append(values)
    if len(sets) == 1:
        return [dict(r) for r in sets[0] if isinstance(r, dict)]
    return [{"dataset": i, **r} for i, rows in enumerate(sets, 1) for r in rows if isinstance(r, dict)]


def figure_csv(spec: dict[str, Any]) -> str:
    """The figure's data rows as CSV, the columns in first-seen order."""
    rows = figure_rows(spec)
    columns: dict[str, None] = {}
    for r in rows:
        columns.update(dict.fromkeys(r))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()
