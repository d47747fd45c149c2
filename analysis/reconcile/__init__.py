"""One module per report section; each exposes ``run(s: SectionInput) -> Section`` (tables + findings), and
analysis.pipeline.analyze.SECTIONS calls them all the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pandas as pd

from analysis.core.findings import Finding
from analysis.core.keys import At
from analysis.core.windows import ClockOffset, PointWindowData
from analysis.loading.campaign import BenchPoint, Campaign, RunData
from analysis.reconcile.theoryctx import TheoryCtx

# a run's sampler series: (sample times, s; {counter or gauge column: one value per sample})
SamplerSeries = tuple[list[float], dict[str, list[float]]]


class GateOutcome(Protocol):
    """One gate's result on a point, as the sections read it (``gates.GateResult``, which this module cannot
    import: gates reads the Context)."""

    @property
    def gate(self) -> str: ...
    @property
    def status(self) -> str: ...  # "pass" | "fail" | "unknown"
    @property
    def severity(self) -> str: ...  # "exclude" | "flag"
    @property
    def reason(self) -> str | None: ...  # labels_zh.REASONS code when not pass
    @property
    def source(self) -> str | None: ...
    @property
    def detail(self) -> str: ...


def run_at(run: RunData, weight_format: str | None, topic: str | None = None) -> At:
    """The address of findings about one of our own runs (their key: ``runs.<run>.…``)."""
    return At(level="run", run=run.name, engine=run.engine, weight_format=weight_format, topic=topic)


def engine_at(
    round: str | None, engine: str, weight_format: str | None = None, topic: str | None = None
) -> At:
    """The address of findings about one engine in a round (their key: ``<round>.<engine>.…``)."""
    return At(level="engine", round=round, engine=engine, weight_format=weight_format, topic=topic)


@dataclass
class Section:
    """What a reconciliation hands the pipeline: tidy tables by name and the findings it states."""

    name: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


@dataclass
class Context:
    """Shared, computed-once state the sections read: the campaign, the aligned sampler windows per
    point, the clock offsets per run, and the gate results per point."""

    campaign: Campaign
    windows: dict[str, PointWindowData] = field(default_factory=dict)  # point key -> its window's data
    # imported run name -> (the client clock's offset found, citation of the sampler CSV)
    offsets: dict[str, tuple[ClockOffset, str]] = field(default_factory=dict)
    gates: dict[str, Sequence[GateOutcome]] = field(default_factory=dict)  # point key -> its gates' results
    sampler_series: dict[str, SamplerSeries] = field(default_factory=dict)  # run name -> its series
    # own run name -> the scrapes.jsonl line of each sample
    sample_lines: dict[str, list[int]] = field(default_factory=dict)

    def sample_line(self, run: RunData, row: int) -> int:
        """The file line of one sample: the CSV line (row + 2: header, 1-based) or the scrape's JSONL line."""
        if run.name in self.sample_lines:
            return self.sample_lines[run.name][row]
        return row + 2

    def sample_cite(self, run: RunData, row: int) -> str:
        return run.cite(run.counter_source or "", self.sample_line(run, row))

    def window(self, point: BenchPoint) -> PointWindowData | None:
        return self.windows.get(point.key)

    def gate_ok(self, point: BenchPoint) -> bool:
        """No exclude-severity gate failed: the point may carry conclusions."""
        return not self.gate_failures(point)

    def gate_failures(self, point: BenchPoint) -> list[str]:
        return [
            g.gate for g in self.gates.get(point.key, []) if g.status == "fail" and g.severity == "exclude"
        ]

    def gate_flags(self, point: BenchPoint) -> list[str]:
        return [g.gate for g in self.gates.get(point.key, []) if g.status == "fail" and g.severity == "flag"]


@dataclass
class SectionInput:
    """What every section's ``run`` reads, built once per campaign by the pipeline: the campaign, the shared
    gated context, the theory, the per-point table (``points``), the SLOs given at analysis time and the raw
    roots the campaign was read from."""

    campaign: Campaign
    ctx: Context
    th: TheoryCtx
    points: pd.DataFrame = field(default_factory=pd.DataFrame)
    slos_ms: dict[str, float] | None = None
    raw_roots: list[Path] = field(default_factory=list)
