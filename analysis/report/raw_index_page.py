"""The raw-data index of one campaign: every run and file with size and sha256, and the findings citing it
(from the results' ``raw_runs``/``raw_files`` tables: analysis/reconcile/provenance.py)."""

from __future__ import annotations

from collections.abc import Callable

from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page
from analysis.report.rawindex import link_findings
from analysis.report.results import CampaignResults

TEMPLATE = "raw_index.md.j2"


def path_of(campaign: str) -> str:
    return f"data/{campaign}.md"


def link(site: SiteState, c: CampaignResults, is_repo_file: Callable[[str], bool]) -> None:
    """Mark each raw file with the findings citing it; note citations that match no raw file (files of this
    repository, such as a bundled model config, are not raw data and are expected)."""
    for u in link_findings(site.runs.get(c.name, []), c.findings):
        if not is_repo_file(u):
            site.report.notes.append(f"{c.name}: cited source {u!r} matches no raw file")


def render(site: SiteState, c: CampaignResults, downloads: list[str] | None = None) -> Page:
    """``downloads``: the analysis output copied beside the page (findings.json, tables/*.csv), relative
    paths."""
    runs = site.runs.get(c.name, [])
    files = [f for r in runs for f in r.files]
    return render_template(
        site, TEMPLATE, path_of(c.name), c, runs=runs, raw_files=files, downloads=downloads or []
    )
