"""Issue #22: the reference study's claims on our pages. Every campaign page gets a block with the numbers the
reference states in its own words beyond the page's own sections (``_reference_block.j2``); on the reference
campaign the block also lists the claims the page cannot reproduce, naming the file each needs. The ledger
page (``reference_claims.md``) lists every claim with where it is accounted for, and the methodology page's
marker line becomes the counts."""

from __future__ import annotations

from typing import Any

import jinja2

from analysis.core import labels_zh
from analysis.report import reference_claims
from analysis.report.context import SiteState, render_template
from analysis.report.markdown import Page, anchor_of
from analysis.report.results import CampaignResults

LEDGER_PAGE = "reference_claims.md"
BLOCK = "_reference_block.j2"
COUNTS_MARKER = "<!-- reference-claims-counts -->"
# a campaign page slug -> the ledger's page key (the overview's slug is "index")
SLUG_PAGE = {"index": "overview"}


def has_template(site: SiteState, name: str) -> bool:
    """The site's template set has this template (a reduced set, as the renderer's tests use, may not)."""
    try:
        site.env.get_template(name)
    except jinja2.TemplateNotFound:
        return False
    return True


def na_reason(code: str) -> str:
    """The Chinese reason of an n/a claim: the ledger's own codes first, then the findings' reasons."""
    return labels_zh.REFERENCE_NA_REASONS.get(code) or labels_zh.reason_text(code)


def extend(site: SiteState, c: CampaignResults, slug: str, page: Page, **common: Any) -> Page:
    """The page with the block appended (the page unchanged when the block has nothing to say, or the template
    set has no block)."""
    if not has_template(site, BLOCK):
        return page
    claims = reference_claims.load() if c.name == common.get("reference_campaign") else []
    key = SLUG_PAGE.get(slug, slug)
    na = [x for x in claims if x.status == "na" and x.page == key]
    block = render_template(
        site, "_reference_block.j2", page.path, c, slug=slug, claims_na=na, na_reason=na_reason, **common
    ).text
    return Page(page.path, page.text.rstrip("\n") + "\n" + block) if block.strip() else page


def fragment(c: reference_claims.Claim) -> str:
    """Where on its page a claim is: a shown finding's row, an n/a claim's line; a table cell or a text has no
    anchor of its own (the page, then)."""
    if c.status == "shown" and c.finding_key:
        return f"#{anchor_of(c.finding_key)}"
    return f"#ref-{c.id.lower()}" if c.status == "na" else ""


def ledger_page(site: SiteState, reference: str, **common: Any) -> Page:
    """The ledger page: the counts, then every claim with its status and where it is accounted for."""
    claims = reference_claims.load()
    pages = {k: v.format(c=reference) for k, v in reference_claims.PAGES.items() if v}
    return render_template(
        site,
        "reference_claims.md.j2",
        LEDGER_PAGE,
        None,
        claims=claims,
        frag={c.id: fragment(c) for c in claims},
        # a shown finding links to its row on the page that holds it (the named page may only link to it)
        target={
            c.id: site.finding_pages.get((reference, c.finding_key or ""), pages.get(c.page, ""))
            for c in claims
        },
        counts=reference_claims.counts(claims),
        pages=pages,
        statuses=labels_zh.REFERENCE_STATUSES,
        na_reason=na_reason,
        **common,
    )


def with_counts(site: SiteState, text: str) -> str:
    """A hand-written page's counts marker replaced by the ledger's counts (text unchanged without it)."""
    if COUNTS_MARKER not in text:
        return text
    counts = reference_claims.counts(reference_claims.load())
    line = render_template(
        site,
        "_reference_counts.j2",
        "methodology.md",
        None,
        counts=counts,
        statuses=labels_zh.REFERENCE_STATUSES,
        ledger=LEDGER_PAGE,
    ).text.strip()
    return text.replace(COUNTS_MARKER, line)


def without_counts(text: str) -> str:
    """A hand-written page with the counts marker removed (a site built without the reference campaign)."""
    return text.replace(COUNTS_MARKER + "\n", "").replace(COUNTS_MARKER, "")
