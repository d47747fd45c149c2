"""The site build: the Chinese report pages from the analysis results, as a complete MkDocs ``docs_dir``.

``render_site(results_dir, out_docs_dir)`` writes:

- the hand-written pages of ``site/docs`` and the assets of ``site/assets``, copied as they are;
- per campaign, its report pages (campaign_pages.py), its model-structure page (structure_page.py) and its
  raw-data index (raw_index_page.py); the comparison page (comparison_page.py); the home page (home_page.py);
- every figure as a static SVG next to the page that shows it (figures.py);
- ``.nav.json``, the navigation (read by ``site/hooks/nav.py``), and ``.figures.json`` (figures left out,
  why).

It reads the analysis results only (results.py): findings, tables, figure specs and index.json with the
campaign profile — never raw/. The templates hold all the prose (context.py is what they see).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.core import labels_zh
from analysis.report import (
    campaign_pages,
    comparison_page,
    differences_page,
    home_page,
    raw_index_page,
    reference_block,
    structure_page,
    table_downloads,
)
from analysis.report.build_cache import SvgCache, TemplateCache
from analysis.report.context import RenderReport, SiteState, resolve_finding_refs
from analysis.report.env import make_env
from analysis.report.figures import cjk_font_dir
from analysis.report.markdown import Page
from analysis.report.paths import REPO_ROOT, SITE_DIR
from analysis.report.profile import build_profile
from analysis.report.rawindex import runs_of
from analysis.report.results import (
    CampaignResults,
    RenderError,
    discover_campaigns,
    load_campaign,
    load_comparison,
)
from collector.raw.errors import AnatomyError

TEMPLATES_DIR = SITE_DIR / "templates"
HANDWRITTEN_DIR = SITE_DIR / "docs"
ASSETS_DIR = SITE_DIR / "assets"
HANDWRITTEN_PAGES = (
    "methodology.md",
    "glossary.md",
)  # site/docs pages, in the order of the nav's method section
# The reference campaign (someone else's RTX 4090 measurements, imported at build time, never committed).
REFERENCE_CAMPAIGN = "rtx4090-qwen2.5-7b"
NAV_FILE = ".nav.json"
FIGURES_FILE = (
    ".figures.json"  # figures a page deliberately leaves out, and why (a dot file: never published)
)
MARKER = ".rendered-by-analysis-report"  # only a folder carrying it is ever emptied by the renderer


class SiteRenderer:
    def __init__(
        self,
        results_dir: Path,
        out_docs_dir: Path,
        templates_dir: Path = TEMPLATES_DIR,
        handwritten_dir: Path | None = HANDWRITTEN_DIR,
        assets_dir: Path | None = ASSETS_DIR,
        campaigns: list[str] | None = None,
        standalone: bool = False,
        cache: Path | None = None,
    ):
        self.standalone = standalone  # `collector report`: a user's campaigns, not this project's site
        # figures converted and templates compiled by earlier builds (build_cache.py); None: all afresh
        self.figure_cache = SvgCache(cache / "figures") if cache is not None else None
        self.results_dir = Path(results_dir)
        self.out = Path(out_docs_dir)
        self.handwritten_dir = handwritten_dir
        self.assets_dir = assets_dir
        self.only = campaigns
        self.site = SiteState(env=make_env(Path(templates_dir), cache / "templates" if cache else None))
        self._pages: list[Page] = []

    @property
    def report(self) -> RenderReport:
        return self.site.report

    # -- output folder ---------------------------------------------------------------------------------------
    def _prepare_out(self) -> None:
        if self.out.exists() and any(self.out.iterdir()) and not (self.out / MARKER).exists():
            raise RenderError(
                f"{self.out}: exists, is not empty and was not written by the renderer; not touching it"
            )
        if self.out.exists():
            shutil.rmtree(self.out)
        self.out.mkdir(parents=True)
        (self.out / MARKER).write_text("generated; emptied on every render\n")
        if self.handwritten_dir and Path(self.handwritten_dir).is_dir():
            shutil.copytree(self.handwritten_dir, self.out, dirs_exist_ok=True)
        if self.assets_dir and Path(self.assets_dir).is_dir():
            shutil.copytree(self.assets_dir, self.out / "assets", dirs_exist_ok=True)

    def _write(self, page: Page) -> Page:
        """Keep a rendered page; files are written once every page is rendered (_flush), when every
        finding's home page is known and the numbers that link to findings can be resolved."""
        if (self.out / page.path).exists():
            raise RenderError(
                f"{page.path}: rendered page would overwrite a hand-written page of the same path"
            )
        self.report.pages.append(page.path)
        self._pages.append(page)
        return page

    def _flush(self) -> None:
        for page in self._pages:
            self._write_page(page.path, resolve_finding_refs(self.site, page))
        self._pages.clear()
        for rel in HANDWRITTEN_PAGES:  # their tables get their CSVs too
            if (self.out / rel).is_file():
                self._write_page(rel, (self.out / rel).read_text(encoding="utf-8"))

    def _write_page(self, rel: str, text: str) -> None:
        """A page's Markdown, with the CSV of what each of its tables shows beside it (issue #23)."""
        text, files = table_downloads.attach(rel, text, labels_zh.DOWNLOAD_TABLE_CSV)
        for path, data in {rel: text, **files}.items():
            (self.out / path).parent.mkdir(parents=True, exist_ok=True)
            (self.out / path).write_text(data, encoding="utf-8")

    # -- results ---------------------------------------------------------------------------------------------
    def _load(self) -> tuple[list[CampaignResults], CampaignResults | None]:
        dirs = discover_campaigns(self.results_dir)
        if self.only:
            dirs = [d for d in dirs if d.name in self.only]
        campaigns = [load_campaign(d) for d in dirs]
        if not campaigns:
            raise RenderError(
                f"{self.results_dir}: no campaign with a findings.json (run `collector analyze`)"
            )
        site = self.site
        site.campaign_names = {c.name for c in campaigns}
        for c in campaigns:
            site.known_metrics |= {(f.topic, f.metric) for f in c.findings}
            site.profiles[c.name] = build_profile(c, REFERENCE_CAMPAIGN)
            site.runs[c.name] = runs_of(c)
        campaigns.sort(key=lambda c: site.profiles[c.name].sort_key)
        comparison = load_comparison(self.results_dir)
        if comparison is not None:
            site.known_metrics |= {(f.topic, f.metric) for f in comparison.findings}
            for row in (
                comparison.tables["comparison_series"].rows
                if "comparison_series" in comparison.tables
                else []
            ):
                site.series_labels[str(row["series_key"])] = labels_zh.series_label(
                    str(row["engine"]), row.get("weight_format")
                )
        # The comparison page compares GPUs: it needs two analysed GPU campaigns among those rendered.
        gpus = [c for c in campaigns if not site.profiles[c.name].cpu and site.profiles[c.name].gpu]
        if comparison is not None and len(gpus) < 2:
            self.report.notes.append("comparison: fewer than two GPU campaigns, no comparison page")
            comparison = None
        return campaigns, comparison

    # -- the site --------------------------------------------------------------------------------------------
    def render(self) -> RenderReport:
        self._prepare_out()
        campaigns, comparison = self._load()
        site = self.site
        common: dict[str, Any] = {
            "campaigns": campaigns,
            "profiles": site.profiles,
            "comparison": comparison,
            "reference_campaign": REFERENCE_CAMPAIGN,
            "standalone": self.standalone,
        }
        for c in campaigns:
            raw_index_page.link(site, c, is_repo_file=lambda rel: (REPO_ROOT / rel).is_file())
            # a campaign without a model (results a peer tool wrote, imported without a config) has no theory
            theory = [structure_page.path_of(c.name)] if structure_page.model_config(c) is not None else []
            site.planned_pages.update([*theory, *campaign_pages.paths_of(c)])
        structure = [
            self._write(
                reference_block.extend(
                    site, c, "structure", structure_page.render(site, c, **common), **common
                )
            )
            for c in campaigns
            if structure_page.model_config(c) is not None
        ]
        # before the campaign pages: its findings (topic differences) have their rows here, not on an overview
        reference = next((c for c in campaigns if c.name == REFERENCE_CAMPAIGN), None)
        if reference is not None:
            site.planned_pages.add(differences_page.PATH)
        differences = self._write(differences_page.render(site, reference, **common)) if reference else None
        reports = [(c, [self._write(p) for p in campaign_pages.render(site, c, **common)]) for c in campaigns]
        compared = self._write(comparison_page.render(site, comparison, **common)) if comparison else None
        home = self._write(home_page.render(site, **common))
        data = [self._write(raw_index_page.render(site, c, self._downloads(c))) for c in campaigns]
        ledger = (
            self._write(reference_block.ledger_page(site, REFERENCE_CAMPAIGN, **common))
            if REFERENCE_CAMPAIGN in site.campaign_names
            and reference_block.has_template(site, "reference_claims.md.j2")
            else None
        )
        self._with_counts(ledger is not None)

        # a campaign's name is template prose (a macro, which the module's static type does not list)
        short_name = site.env.get_template("_campaigns.j2").module.short  # type: ignore[attr-defined]
        nav_zh = labels_zh.NAV
        nav: list[Any] = [{home.title: home.path}]
        for c, pages in reports:
            nav.append({str(short_name(site.profiles[c.name])).strip(): [{p.title: p.path} for p in pages]})
        if compared is not None:
            nav.append({nav_zh["comparison"]: compared.path})
        if differences is not None:
            nav.append({nav_zh["differences"]: differences.path})
        nav.append({nav_zh["structure"]: [{p.title: p.path} for p in structure]})
        method = [{self._handwritten(rel).title: rel} for rel in HANDWRITTEN_PAGES]
        nav.append({nav_zh["method"]: method + ([{ledger.title: ledger.path}] if ledger else [])})
        nav.append({nav_zh["data"]: [{p.title: p.path} for p in data]})

        self._flush()
        if site.figures.pending and cjk_font_dir() is None:
            self.report.notes.append(
                "no CJK font found (Debian: apt-get install fonts-noto-cjk): figures are laid out with a"
                " Latin font and their Chinese legends will be cut off in the browser"
            )
        site.figures.convert(self.out, self.figure_cache)
        self.report.notes += self.figure_cache.notes if self.figure_cache else []
        if isinstance(site.env.bytecode_cache, TemplateCache):
            self.report.notes += site.env.bytecode_cache.notes
        left_out = site.figures.left_out
        (self.out / FIGURES_FILE).write_text(
            json.dumps({"left_out": left_out}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
        for c in [*campaigns, *([comparison] if comparison else [])]:
            for u in sorted(set(c.figures) - site.figures.shown(c.name) - set(left_out.get(c.name, {}))):
                self.report.notes.append(f"{c.name}: figure {u!r} is on no page")
        (self.out / NAV_FILE).write_text(
            json.dumps(nav, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
        return self.report

    def _with_counts(self, ledger: bool) -> None:
        """The methodology page's counts of the reference study's claims, from the ledger (issue #22); without
        the reference campaign (no ledger page to link to) the marker goes."""
        p = self.out / "methodology.md"
        if p.is_file():
            text = p.read_text(encoding="utf-8")
            text = (
                reference_block.with_counts(self.site, text)
                if ledger
                else reference_block.without_counts(text)
            )
            p.write_text(text, encoding="utf-8")

    def _downloads(self, c: CampaignResults) -> list[str]:
        """The campaign's analysis output as readers can take it away — findings.json and every table's CSV,
        copied beside its raw-data page (``data/<campaign>/``); their paths relative to that page."""
        dest = self.out / "data" / c.name
        files = [(c.path / "findings.json", "findings.json")]
        files += [(t.path, f"tables/{t.path.name}") for _, t in sorted(c.tables.items()) if t.path.is_file()]
        out = []
        for src, rel in files:
            if src.is_file():
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest / rel)
                out.append(f"{c.name}/{rel}")
        return out

    def _handwritten(self, rel: str) -> Page:
        p = self.out / rel
        if not p.exists():
            raise RenderError(f"{p}: hand-written page listed in HANDWRITTEN_PAGES is missing")
        return Page(rel, p.read_text(encoding="utf-8"))


def render_site(
    results_dir: Path,
    out_docs_dir: Path,
    campaigns: list[str] | None = None,
    templates_dir: Path = TEMPLATES_DIR,
    on_line: Callable[[str], None] | None = None,
    standalone: bool = False,
    cache: Path | None = None,
) -> RenderReport:
    """Render every page into ``out_docs_dir`` (emptied first; only a folder the renderer made is emptied);
    ``standalone``: a site of someone's own campaigns (`collector report`), without this project's notes
    about the reference campaign it publishes; ``cache``: a folder keeping converted figures and compiled
    templates between builds."""
    report = SiteRenderer(
        results_dir,
        out_docs_dir,
        templates_dir=templates_dir,
        campaigns=campaigns,
        standalone=standalone,
        cache=cache,
    ).render()
    if on_line is not None:
        for line in report.lines():
            on_line(line)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m analysis.report.render`` (or ``python site/render.py``): render the pages, print a
    summary."""
    ap = argparse.ArgumentParser(description="Render the Chinese report pages from the analysis output.")
    ap.add_argument(
        "--results", type=Path, default=REPO_ROOT / "build" / "results", help="collector analyze output"
    )
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "site" / "docs", help="MkDocs docs_dir")
    ap.add_argument("--quiet", action="store_true", help="print only the summary line")
    ap.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="keep converted figures and compiled templates here (build/cache/report)",
    )
    ap.add_argument("campaigns", nargs="*", help="only these campaigns (default: all with results)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    try:
        report = render_site(args.results, args.out, campaigns=args.campaigns or None, cache=args.cache)
    except AnatomyError as err:
        print(f"render: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    except OSError as err:  # a page, a figure or the cache could not be written (disk full, permissions)
        print(f"render: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 1
    lines = report.lines()
    for line in lines[-1:] if args.quiet else lines:
        print(line)
    print(f"render: {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
