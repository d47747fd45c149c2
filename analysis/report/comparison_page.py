"""The cross-campaign comparison page: rendered when the analysis compared two or more GPU campaigns."""

from __future__ import annotations

from typing import Any

from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page
from analysis.report.results import CampaignResults

TEMPLATE = "comparison.md.j2"
PATH = "comparison.md"


def render(site: SiteState, results: CampaignResults, **common: Any) -> Page:
    """``results``: the comparison's own (``_comparison/``); ``common`` names every campaign's."""
    return render_template(site, TEMPLATE, PATH, results, **common)
