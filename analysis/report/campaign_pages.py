"""A campaign's report pages, in reading order: the overview, then one page per question (concurrency, TTFT,
KV, overload, engines, selection, reproducibility, gates). A page whose data the campaign lacks is not
rendered; its findings then appear on the overview, so no finding is ever dropped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analysis.report import experiments_page, ladder_page, rates_page, reference_block, slo_page
from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page
from analysis.report.results import CampaignResults


def _has_rows(c: CampaignResults, table: str, **where: Any) -> bool:
    t = c.tables.get(table)
    return t is not None and len(t.where(**where) if where else t) > 0


def _always(_c: CampaignResults) -> bool:
    return True


# (slug, template, has the data the page is about). The page title is the template's first "# " line.
CAMPAIGN_PAGES: tuple[tuple[str, str, Callable[[CampaignResults], bool]], ...] = (
    ("index", "campaign/overview.md.j2", _always),
    (
        "concurrency",
        "campaign/concurrency.md.j2",
        lambda c: _has_rows(c, "points", test_kind="concurrency_sweep"),
    ),
    ("ttft", "campaign/ttft.md.j2", lambda c: _has_rows(c, "ttft_anatomy")),
    ("lengths", "campaign/lengths.md.j2", lambda c: _has_rows(c, "length_sweep")),  # issue #11
    ("kv", "campaign/kv.md.j2", lambda c: any(_has_rows(c, t) for t in ("kv_pool", "capacity", "kv_fit"))),
    ("overload", "campaign/overload.md.j2", lambda c: _has_rows(c, "points", test_kind="overload")),
    (
        "engines",
        "campaign/engines.md.j2",
        lambda c: _has_rows(c, "engines_points") or _has_rows(c, "roofline_points"),
    ),
    ("selection", "campaign/selection.md.j2", lambda c: _has_rows(c, "selection_guide")),
    slo_page.PAGE,  # issue #14
    rates_page.PAGE,  # issue #14: open-loop rate sweeps
    (
        "reproducibility",
        "campaign/reproducibility.md.j2",
        lambda c: _has_rows(c, "reproducibility") or _has_rows(c, "reproducibility_changes"),
    ),
    experiments_page.PAGE,  # issue #15
    ladder_page.PAGE,  # issue #26
    ("gates", "campaign/gates.md.j2", lambda c: _has_rows(c, "gates")),
)


def paths_of(c: CampaignResults) -> list[str]:
    """The pages the campaign will have (those whose data it holds), in reading order."""
    return [f"campaigns/{c.name}/{slug}.md" for slug, _t, has_data in CAMPAIGN_PAGES if has_data(c)]


def render(site: SiteState, c: CampaignResults, **common: Any) -> list[Page]:
    """The campaign's pages in reading order. The overview is rendered last: it lists the findings and
    figures that no other page shows."""
    pages = [(slug, template) for slug, template, has_data in CAMPAIGN_PAGES if has_data(c)]
    skipped = [slug for slug, _t, has_data in CAMPAIGN_PAGES if not has_data(c)]
    if skipped:
        site.report.notes.append(f"{c.name}: no data for pages {', '.join(skipped)}")
    slugs = [slug for slug, _ in pages]
    rendered: dict[str, Page] = {}
    for slug, template in [*pages[1:], pages[0]]:
        page = render_template(site, template, f"campaigns/{c.name}/{slug}.md", c, page_slugs=slugs, **common)
        rendered[slug] = reference_block.extend(site, c, slug, page, **common)  # issue #22
    return [rendered[slug] for slug in slugs]
