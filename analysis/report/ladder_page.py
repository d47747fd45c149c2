"""A campaign's deployment-ladder page (issue #26): from the default configuration, one change per step, the
goodput each step bought under the plans' SLO (answer first), why, then the evidence; and speculative
decoding by its mechanism (step costs, the expected-speedup theory, the server runs, how a reader reads off
their own gain). The analysis is analysis/reconcile/ladder.py and speculative.py; the prose is
site/templates/campaign/ladder.md.j2."""

from __future__ import annotations

from analysis.report.results import CampaignResults

SLUG = "ladder"
TEMPLATE = "campaign/ladder.md.j2"


def has_ladder(c: CampaignResults) -> bool:
    """The campaign ran the ladder (its steps table has rows)."""
    return c.has_rows("ladder_steps")


# the entry of analysis.report.campaign_pages.CAMPAIGN_PAGES
PAGE = (SLUG, TEMPLATE, has_ladder)
