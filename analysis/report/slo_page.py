"""A campaign's SLO-planning page (issue #14, item 3): per round and engine, the highest concurrency meeting
the campaign's default p99 TTFT budget (analysis.reconcile.slo.default_budget_ms: the reference study's 730
ms for the imported campaign, a budget every sweep of our own brackets where one exists), how it was
interpolated, the goodput there, the engine settings that follow, and the point to measure next where the
sweep does not bracket the budget. The analysis is analysis/reconcile/slo/; the prose is
site/templates/campaign/slo.md.j2."""

from __future__ import annotations

from analysis.report.results import CampaignResults

SLUG = "slo"
TEMPLATE = "campaign/slo.md.j2"


def has_plan(c: CampaignResults) -> bool:
    """The planner had sweep points to read (its table has rows)."""
    return c.has_rows("slo_plan")


# the entry of analysis.report.campaign_pages.CAMPAIGN_PAGES
PAGE = (SLUG, TEMPLATE, has_plan)
