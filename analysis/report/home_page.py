"""The home page: every campaign's answers first, then the cross-campaign results and how to reproduce."""

from __future__ import annotations

from typing import Any

from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page

TEMPLATE = "home.md.j2"
PATH = "index.md"


def render(site: SiteState, **common: Any) -> Page:
    return render_template(site, TEMPLATE, PATH, None, **common)
