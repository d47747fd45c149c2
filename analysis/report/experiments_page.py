"""A campaign's page of controlled experiments (issue #15): one section per experiment the campaign ran — the
question, the answer with its number and direction, why, what to do, then the evidence (prediction,
measurement, verdict, chart) — and the experiments it could not run, with why. The analysis is
analysis/reconcile/experiments/; the prose is site/templates/campaign/experiments.md.j2."""

from __future__ import annotations

from analysis.report.results import CampaignResults

SLUG = "experiments"
TEMPLATE = "campaign/experiments.md.j2"
# the experiment findings' topics: exp_<experiment>; the ones not run are under this topic
NOT_RUN_TOPIC = "experiments"


def has_experiments(c: CampaignResults) -> bool:
    """The campaign ran an experiment (its runs table has rows) or says which it could not run."""
    runs = c.tables.get("experiment_runs")
    return (runs is not None and len(runs) > 0) or bool(c.findings.select(topic=NOT_RUN_TOPIC))


# the entry of analysis.report.campaign_pages.CAMPAIGN_PAGES
PAGE = (SLUG, TEMPLATE, has_experiments)
