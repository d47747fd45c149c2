"""The home page: every campaign's answers first, then the cross-campaign results and how to reproduce.

Its trust section lists, as the reference study did, what was not understood and what was not measured:
``gaps`` groups a campaign's n/a findings by the data they lack (labels_zh.MISSING_DATA), naming the rounds,
engines and folders without it and the series that do have it; ``unexplained`` is what the analysis measured
but could not account for (a failed reconciliation, a throughput dip it left unexplained)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from analysis.core import labels_zh
from analysis.core.findings import Finding
from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page
from analysis.report.results import CampaignResults

TEMPLATE = "home.md.j2"
PATH = "index.md"
GAP_LABELS_LISTED = 3  # quantities a 没测的 line names before it counts the rest


@dataclass(frozen=True)
class Gap:
    """One kind of data a campaign lacks, where, what it would have answered, and who has it."""

    reason: str  # labels_zh.MISSING_DATA key
    missing: list[tuple[str | None, str | None, str | None, str]]  # (round, engine, weight format, folder)
    findings: list[Finding]  # the n/a findings it leaves without a value
    have: list[tuple[str | None, str | None, str | None]]  # series with the same quantities measured

    @property
    def series(self) -> list[tuple[str | None, str | None, str | None]]:
        """The (round, engine, weight format) without it, each once."""
        return sorted({m[:3] for m in self.missing}, key=str)

    @property
    def folders(self) -> list[str]:
        return sorted({m[3] for m in self.missing if m[3]})

    @property
    def labels(self) -> list[str]:
        """What it leaves without a number, each quantity once (labels without round or engine)."""
        return list(dict.fromkeys(labels_zh.finding_label(f, scope=False) for f in self.findings))

    @property
    def labels_listed(self) -> list[str]:
        """The quantities the home page names (a trust line stays one line: the rest are counted)."""
        return self.labels[:GAP_LABELS_LISTED]

    @property
    def labels_unlisted(self) -> int:
        return len(self.labels) - len(self.labels_listed)


def _folder(f: Finding) -> str:
    """The folder of the files the finding would have come from (its first source's)."""
    return str(PurePosixPath(f.sources[0]).parent) if f.sources else ""


def _series(f: Finding) -> tuple[str | None, str | None, str | None]:
    return (f.round, f.engine, getattr(f, "weight_format", None))


def _engines_first(series: list) -> list:
    """Drop a round's engine-less entry where the same round names engines ("第二轮 vLLM、第二轮" reads as
    one thing said twice)."""
    named = {s[0] for s in series if s[1]}
    return [s for s in series if s[1] or s[0] not in named]


def gaps(c: CampaignResults) -> list[Gap]:
    """The campaign's missing data, one entry per kind (labels_zh.MISSING_DATA order)."""
    out = []
    for reason in labels_zh.MISSING_DATA:
        lacking = [f for f in c.findings if not f.available and f.reason == reason]
        if not lacking:
            continue
        missing = sorted({(*_series(f), _folder(f)) for f in lacking}, key=str)
        metrics = {f.metric for f in lacking}
        lacking_series = {_series(f) for f in lacking}
        have = sorted(
            {_series(f) for f in c.findings if f.available and f.metric in metrics} - lacking_series, key=str
        )
        out.append(Gap(reason, _engines_first(missing), lacking, _engines_first(have)))
    return out


def unexplained(c: CampaignResults) -> list[Finding]:
    """What was measured but not accounted for: failed reconciliations, and findings the analysis marks
    ``explained: false`` that hold something (a throughput dip)."""
    return [
        f
        for f in c.findings
        if f.topic != "gates"  # the self-checks have their own line above
        and (f.failed or (f.available and f.extra.get("explained") is False and f.value))
    ]


def render(site: SiteState, **common: Any) -> Page:
    return render_template(site, TEMPLATE, PATH, None, gaps=gaps, unexplained=unexplained, **common)
