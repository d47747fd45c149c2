"""The model-structure page of one campaign: the theory's inputs (the model config the analysis used, table
``model_config``) and its derivations (findings of topic ``model``)."""

from __future__ import annotations

from typing import Any

from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page
from analysis.report.results import CampaignResults

TEMPLATE = "structure.md.j2"


def path_of(campaign: str) -> str:
    return f"structure/{campaign}.md"


def model_config(c: CampaignResults) -> dict[str, Any] | None:
    """The config the theory was computed from, as the analysis recorded it; None without a model."""
    t = c.tables.get("model_config")
    return t.rows[0] if t is not None and t.rows else None


def render(site: SiteState, c: CampaignResults, **common: Any) -> Page:
    return render_template(site, TEMPLATE, path_of(c.name), c, model_config=model_config(c), **common)
