"""A campaign's rate-sweep page (issue #14, items 1 and 5): open-loop points (a ``kind = "rate"`` phase)
against the rate they were offered — the saturation rate and the highest goodput first, then throughput,
latency percentiles and goodput over the offered rate, then the evidence table. The analysis is
analysis/reconcile/rates.py; the prose is site/templates/campaign/rates.md.j2. A campaign without rate points
gets no such page (its overview lists the pages without data)."""

from __future__ import annotations

from analysis.report.results import CampaignResults

SLUG = "rates"
TEMPLATE = "campaign/rates.md.j2"


def has_rate_points(c: CampaignResults) -> bool:
    """The campaign has open-loop points (the ``rate_points`` table has rows)."""
    return c.has_rows("rate_points")


# the entry of analysis.report.campaign_pages.CAMPAIGN_PAGES
PAGE = (SLUG, TEMPLATE, has_rate_points)
