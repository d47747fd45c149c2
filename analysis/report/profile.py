"""What kind of campaign a page is about: facts the templates branch on, read from the results (index.json's
profile, written by analysis/pipeline/analyze.py, and the tables) — never from raw/.

A campaign is either imported (someone else's result folders, organised in rounds, one engine per weight
format) or collected by our own ``collector run`` (one run per engine and weight format, no rounds). The
pages of both are rendered by the same templates; they differ in which findings exist. A *series* is one
concurrency sweep of one engine with one weight format — the unit every report compares — and carries the
fields that select its findings (round and engine for an imported campaign's newest round, the run for one of
ours).

Nothing here computes a number: the profile only says which findings, tables and labels apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analysis.core import labels_zh
from analysis.report.results import CampaignResults, RenderError, Table


@dataclass(frozen=True)
class Series:
    key: str  # the series' name in the tables (roofline_points.series)
    select: dict[str, Any]  # the fields that pick its own findings: {"run": …} or {"round": …, "engine": …}
    engine: str
    weight_format: str | None
    run: str | None
    round: str
    label: str  # Chinese, for prose and table cells


@dataclass
class CampaignProfile:
    name: str
    collected: bool  # written by our collector (else imported)
    cpu: bool  # measured on a CPU: a smoke campaign, no GPU numbers
    gpu: str | None  # datasheet key (``rtx4090``, ``h200``)
    gpu_display: str | None
    random_weights: bool  # the model has random weights: its text output is noise
    descriptions: list[str]
    engines: list[str]
    series: list[Series]
    n_runs: int
    is_reference: bool
    weight_formats: dict[str, list[str]] = field(default_factory=dict)  # engine -> formats measured

    def engine_label(self, engine: str) -> str:
        """``llama.cpp（Q4_K_M）`` when the campaign ran the engine with one format, else the bare name."""
        formats = self.weight_formats.get(engine, [])
        name = labels_zh.ENGINE_NAMES.get(engine, engine)
        if len(formats) == 1:
            return f"{name}（{format_label(formats[0])}）"
        if not formats:
            return labels_zh.ENGINES.get(engine, name) if not self.collected else name
        return name

    @property
    def sort_key(self) -> tuple:
        """Reference first, then other GPU campaigns, CPU smoke campaigns last."""
        return (self.cpu, not self.is_reference, self.name)


format_label = labels_zh.format_label


def _rows(c: CampaignResults, table: str) -> list[dict[str, Any]]:
    t: Table | None = c.tables.get(table)
    return t.rows if t is not None else []


def series_of(c: CampaignResults, collected: bool) -> list[Series]:
    """The campaign's series from ``roofline_points`` (one row per sweep point); the newest round only."""
    rows = _rows(c, "roofline_points")
    seen: dict[str, dict[str, Any]] = {}
    for r in rows:
        seen.setdefault(str(r["series"]), r)
    latest = c.rounds[-1] if c.rounds else ""
    out = []
    for key, r in seen.items():
        rnd = str(r.get("round") or "")
        if not collected and rnd != latest:
            continue
        engine = str(r["engine"])
        fmt = r.get("weight_format")
        run = str(r.get("run") or "") or None
        select = {"run": run} if collected and run else {"round": rnd or None, "engine": engine}
        label = labels_zh.series_label(engine, fmt) if fmt else f"{labels_zh.engine_name(engine)}（—）"
        out.append(Series(key, select, engine, fmt, run, rnd, label))
    return sorted(out, key=lambda s: (s.engine != "vllm", s.engine, s.label))


def build_profile(c: CampaignResults, reference: str) -> CampaignProfile:
    """The profile of one campaign from its results."""
    facts = c.index.get("profile")
    if not isinstance(facts, dict):
        raise RenderError(f"{c.path}/index.json: no campaign profile (re-run `collector analyze`)")
    series = series_of(c, bool(facts.get("collected")))
    formats: dict[str, list[str]] = {}
    for s in series:
        if s.weight_format and s.weight_format not in formats.setdefault(s.engine, []):
            formats[s.engine].append(s.weight_format)
    engines = sorted(
        {s.engine for s in series} | {str(r["engine"]) for r in _rows(c, "points") if r.get("engine")}
    )
    descriptions = [str(d) for d in facts.get("descriptions") or []]
    return CampaignProfile(
        name=c.name,
        collected=bool(facts.get("collected")),
        cpu=bool(facts.get("cpu")),
        gpu=facts.get("gpu") or None,
        gpu_display=facts.get("gpu_display") or None,
        random_weights=any("random" in d.lower() for d in descriptions),
        descriptions=descriptions,
        engines=engines,
        series=series,
        n_runs=len(_rows(c, "raw_runs")),
        is_reference=c.name == reference,
        weight_formats=formats,
    )
