"""Render the Chinese report pages from the analysis output: jinja2 templates + findings + tables + figures.

``render_site(results_dir, raw_roots, out_docs_dir)`` writes a complete MkDocs ``docs_dir``:

- the hand-written pages of ``site/docs`` and the assets of ``site/assets``, copied as they are;
- per campaign, one page per template in ``CAMPAIGN_PAGES`` (``site/templates/campaign/*.md.j2``);
- the home page, the model-structure pages, the raw-data index;
- every figure as a static SVG next to the page that shows it;
- ``.nav.json``, the navigation (read by ``site/hooks/nav.py``).

The templates hold all the prose; this module only supplies data and formatting. Jinja runs with
``StrictUndefined`` and every lookup helper raises ``RenderError``: a placeholder the results cannot fill fails
the build with the template and the missing name, instead of publishing a blank.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from analysis import labels_zh
from analysis.report import figures as figs
from analysis.report import format as fmt
from analysis.report.rawindex import FileLookup, RawRun, index_runs, link_findings
from analysis.report.results import (
    CampaignResults,
    Finding,
    RenderError,
    Table,
    discover_campaigns,
    load_campaign,
    source_file,
    source_path,
    status_class,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = REPO_ROOT / "site" / "templates"
HANDWRITTEN_DIR = REPO_ROOT / "site" / "docs"
ASSETS_DIR = REPO_ROOT / "site" / "assets"
NAV_FILE = ".nav.json"
MARKER = ".rendered-by-analysis-report"  # only a folder carrying it is ever emptied by the renderer

# Campaign pages in reading order: (slug, template). The page title is the template's first "# " line.
CAMPAIGN_PAGES: tuple[tuple[str, str], ...] = (
    ("index", "campaign/overview.md.j2"),
    ("concurrency", "campaign/concurrency.md.j2"),
    ("ttft", "campaign/ttft.md.j2"),
    ("kv", "campaign/kv.md.j2"),
    ("overload", "campaign/overload.md.j2"),
    ("engines", "campaign/engines.md.j2"),
    ("selection", "campaign/selection.md.j2"),
    ("reproducibility", "campaign/reproducibility.md.j2"),
    ("gates", "campaign/gates.md.j2"),
)
_H1 = re.compile(r"^# (.+?)\s*(\{[^}]*\})?\s*$", re.M)


@dataclass
class Page:
    path: str  # relative to docs_dir, posix
    text: str

    @property
    def title(self) -> str:
        m = _H1.search(self.text)
        if not m:
            raise RenderError(f"{self.path}: page has no '# title' line")
        return m.group(1)


@dataclass
class RenderReport:
    pages: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"page    {p}" for p in self.pages]
        out += [f"figure  {f}" for f in self.figures]
        out += [f"note    {n}" for n in self.notes]
        out.append(f"rendered {len(self.pages)} pages, {len(self.figures)} figures")
        return out


# -- table formatting ---------------------------------------------------------------------------------


def format_cell(column: str, value: Any) -> str:
    """Format a table cell by the unit its column name carries (units live in names: ``ttft_ms``)."""
    if column == "round" and isinstance(value, str):
        return labels_zh.ROUNDS.get(value, value)
    if column == "engine" and isinstance(value, str):
        return labels_zh.ENGINES.get(value, value)
    if column == "part" and isinstance(value, str):
        return labels_zh.TTFT_PARTS.get(value, labels_zh.COMPONENTS.get(value, value))
    if column == "group" and isinstance(value, str):
        return labels_zh.COMPONENTS.get(value, value)
    if column == "gate" and isinstance(value, str):
        return labels_zh.GATES.get(value, value)
    if column == "reason" and isinstance(value, str):
        return labels_zh.REASONS.get(value, value)
    if value is None or isinstance(value, bool) or isinstance(value, str):
        return fmt.fmt_value(value)
    c = column.lower()
    if c.endswith("_pct") or c.endswith("_percent"):
        return fmt.fmt_signed_pct(value) if ("error" in c or "delta" in c) else fmt.fmt_pct(value)
    if c.endswith("_fraction") or c in ("kv_usage", "mfu", "mbu"):
        return fmt.fmt_fraction_pct(value)
    if c.endswith("_bytes_per_s"):
        return fmt.fmt_num(value / 1e9) + " GB/s"  # datasheet bandwidth is decimal GB/s
    if ("bytes" in c and not c.endswith("_per_token")) or c.endswith("_size"):
        return fmt.fmt_bytes(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1000:
        return fmt.fmt_int(value)
    return fmt.fmt_num(value)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: list[str], rows: Iterable[list[str]], align: list[str] | None = None) -> str:
    rows = list(rows)
    align = align or ["---"] + ["--:"] * (len(headers) - 1)
    lines = ["| " + " | ".join(_md_escape(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# -- the context a template sees -------------------------------------------------------------------------


class PageContext:
    """Helpers bound to one page: findings lookups, tables, figures. Each raises on a missing name."""

    def __init__(self, site: SiteRenderer, page_path: str, campaign: CampaignResults | None):
        self.site = site
        self.page_path = page_path
        self.campaign = campaign
        self.used_findings: set[str] = set()

    def for_campaign(self, campaign: CampaignResults) -> PageContext:
        """The same page, looking up another campaign's findings (the home page spans campaigns)."""
        other = PageContext(self.site, self.page_path, campaign)
        return other

    # findings
    def _findings(self) -> dict[str, Finding]:
        if self.campaign is None:
            raise RenderError(f"{self.page_path}: this page has no campaign; findings are per campaign")
        return self.campaign.findings

    def f(self, key: str) -> Finding:
        found = self._findings().get(key)
        if found is None:
            raise RenderError(
                f"{self.page_path}: findings.json of campaign {self.campaign.name} has no key {key!r}"  # type: ignore[union-attr]
            )
        self.used_findings.add(key)
        return found

    def unshown(self) -> list[str]:
        """Keys of this campaign that no page rendered so far has shown."""
        return [k for k in sorted(self._findings()) if (self.campaign.name, k) not in self.site.finding_pages]  # type: ignore[union-attr]

    def has(self, key: str) -> bool:
        """True when the finding exists and has a value (use only where a campaign may lack the data)."""
        found = self._findings().get(key)
        return found is not None and found.available

    def per_round(self, suffixes: list[str]) -> list[tuple[str, list[str]]]:
        """For each round, the keys ``<round>.<suffix>`` that exist, in the order given.

        A suffix that exists in no round at all is a typo or a renamed finding: that fails the build.
        Campaigns without rounds use the bare suffixes (round name "").
        """
        findings = self._findings()
        rounds = self.campaign.rounds or [""]  # type: ignore[union-attr]
        out = []
        seen: set[str] = set()
        for r in rounds:
            ks = [f"{r}.{s}" if r else s for s in suffixes]
            present = [k for k in ks if k in findings]
            seen |= {s for s, k in zip(suffixes, ks, strict=True) if k in findings}
            out.append((r, present))
        missing = [s for s in suffixes if s not in seen]
        if missing:
            raise RenderError(f"{self.page_path}: no round of {self.campaign.name} has findings {missing}")  # type: ignore[union-attr]
        return out

    def keys(self, prefix: str = "", section: str | None = None, round: str | None = None) -> list[str]:
        out = []
        for k, f in sorted(self._findings().items()):
            if prefix and not k.startswith(prefix):
                continue
            if section is not None and f.section != section:
                continue
            if round is not None and f.round != round:
                continue
            out.append(k)
        return out

    # tables
    def t(self, name: str) -> Table:
        if self.campaign is None or name not in self.campaign.tables:
            have = ", ".join(sorted(self.campaign.tables)) if self.campaign else "none"
            raise RenderError(f"{self.page_path}: no table {name!r} in the results (have: {have})")
        return self.campaign.tables[name]

    def has_table(self, name: str) -> bool:
        return self.campaign is not None and name in self.campaign.tables and len(self.campaign.tables[name]) > 0

    def table(
        self,
        name: str | Table,
        columns: list[Any],
        where: dict[str, Any] | None = None,
        relabel: dict[str, dict[Any, str]] | None = None,
    ) -> str:
        """A markdown table of chosen columns: ``columns`` = [(column, header), …] with headers from the template.

        ``relabel`` maps a column's raw values to words (from the template, e.g. gate statuses). Text columns
        are left-aligned, numeric ones right-aligned.
        """
        tab = name if isinstance(name, Table) else self.t(name)
        if where:
            tab = tab.where(**where)
        # A bare column name takes its Chinese header from labels_zh.COLUMNS.
        cols: list[tuple[str, str]] = [
            tuple(c) if not isinstance(c, str) else (c, labels_zh.COLUMNS.get(c, c)) for c in columns  # type: ignore[misc]
        ]
        for col, _ in cols:
            if col not in tab.columns:
                raise RenderError(
                    f"{self.page_path}: table {tab.name!r} has no column {col!r} (has: {', '.join(tab.columns)})"
                )
        if not tab.rows:
            raise RenderError(f"{self.page_path}: table {tab.name!r} has no rows{' for ' + str(where) if where else ''}")
        relabel = relabel or {}

        def cell(col: str, value: Any) -> str:
            if col in relabel and value in relabel[col]:
                return relabel[col][value]
            return format_cell(col, value)

        body = [[cell(col, row[col]) for col, _ in cols] for row in tab.rows]
        numeric = [
            all(isinstance(r[col], (int, float)) and not isinstance(r[col], bool) for r in tab.rows if r[col] is not None)
            and col not in relabel
            for col, _ in cols
        ]
        align = ["--:" if n else "---" for n in numeric]
        return markdown_table([h for _, h in cols], body, align)

    # figures
    def figure(self, name: str, caption: str, title: str | None = None, alt: str | None = None) -> str:
        """The figure as a static SVG beside this page, with the caption (what to look at) below it."""
        if self.campaign is None or name not in self.campaign.figures:
            have = ", ".join(sorted(self.campaign.figures)) if self.campaign else "none"
            raise RenderError(f"{self.page_path}: no figure {name!r} in the results (have: {have})")
        if not caption.strip():
            raise RenderError(f"{self.page_path}: figure {name!r} needs a caption saying what to look at")
        # Layered specs may carry their title only in labels_zh.FIGURES (the analysis' source of titles).
        title = title or figs.spec_title(figs.load_spec(self.campaign.figures[name])) or labels_zh.FIGURES.get(
            name.rsplit("/", 1)[-1], {}
        ).get("title")
        rel = self.site.write_figure(self.campaign, name, self.page_path, title)
        shown_title = title or name
        return (
            f'<figure class="ia-figure" markdown="span">\n'
            f"  ![{_md_escape(alt or shown_title)}]({rel}){{ loading=lazy }}\n"
            f"  <figcaption>{caption.strip()}</figcaption>\n"
            f"</figure>\n"
        )

    def has_figure(self, name: str) -> bool:
        return self.campaign is not None and name in self.campaign.figures

    def finding_anchor(self, key: str) -> str:
        """The HTML id of a finding's row on this page; the first page that shows a finding is its home."""
        if self.campaign is not None:
            self.site.finding_pages.setdefault((self.campaign.name, key), self.page_path)
        return "f-" + re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")

    def finding_link(self, key: str) -> str:
        """A link to the page (and row) where a finding is shown; raises if no page shows it."""
        if self.campaign is None:
            return f"`{key}`"
        home = self.site.finding_pages.get((self.campaign.name, key))
        if home is None:
            raise RenderError(f"{self.page_path}: finding {key!r} is shown on no page")
        anchor = "f-" + re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
        return f"[`{key}`]({self.link(home)}#{anchor})"

    # citations
    def source_link(self, source: Any) -> str:
        """A finding's citation as a link to its file's row in the raw-data index of the campaign."""
        text = source_path(source)
        hit = self.site.lookup(self.campaign).find(source_file(source)) if self.campaign else None
        if hit is None:
            return f"`{text}`"
        return f"[`{text}`]({self.link(f'data/{hit.campaign}.md')}#{file_anchor(hit.run, hit.rel)})"

    def sources(self, finding: Finding, sep: str = "<br>") -> str:
        """Citations grouped by file: ``[04-perf-test/metrics_sweep.csv](…) :53, 61`` — short, still exact.

        The link text keeps the last two path parts (test folder and file); the link goes to the file's row
        in the data index, which shows the full original path, size and sha256.
        """
        groups: dict[str, list[str]] = {}
        for src in finding.sources:
            file_part = source_file(src)
            detail = source_path(src)[len(file_part) :].lstrip(":#")
            groups.setdefault(file_part, [])
            if detail:
                groups[file_part].append(detail)
        parts = []
        for file_part, details in groups.items():
            short = "/".join(file_part.split("/")[-2:])
            hit = self.site.lookup(self.campaign).find(file_part) if self.campaign else None
            text = f"[{short}]({self.link(f'data/{hit.campaign}.md')}#{file_anchor(hit.run, hit.rel)})" if hit else short
            if details:
                text += " :" + ", ".join(details)
            parts.append(f'<span class="ia-src">{text}</span>')
        return sep.join(parts) or fmt.MISSING

    # links
    def link(self, target: str) -> str:
        """A relative link from this page to another page (both relative to docs_dir)."""
        here = Path(self.page_path).parent
        return Path(_relpath(target, here.as_posix())).as_posix()


def file_anchor(run: str, rel: str) -> str:
    """The HTML id of a raw file's row in the data index (stable, ASCII, no dots or slashes)."""
    return "raw-" + re.sub(r"[^a-z0-9]+", "-", f"{run}/{rel}".lower()).strip("-")


def _relpath(target: str, from_dir: str) -> str:
    import os.path

    return os.path.relpath(target, from_dir or ".")


# -- the renderer -------------------------------------------------------------------------------------------


class SiteRenderer:
    def __init__(
        self,
        results_dir: Path,
        raw_roots: list[Path],
        out_docs_dir: Path,
        templates_dir: Path = TEMPLATES_DIR,
        handwritten_dir: Path | None = HANDWRITTEN_DIR,
        assets_dir: Path | None = ASSETS_DIR,
        campaigns: list[str] | None = None,
    ):
        self.results_dir = Path(results_dir)
        self.raw_roots = [Path(r) for r in raw_roots]
        self.out = Path(out_docs_dir)
        self.templates_dir = Path(templates_dir)
        self.handwritten_dir = handwritten_dir
        self.assets_dir = assets_dir
        self.only = campaigns
        self.report = RenderReport()
        self.env = self._make_env()
        self._figures_written: dict[tuple[str, str, str], str] = {}
        self.finding_pages: dict[tuple[str, str], str] = {}
        self.runs: list[RawRun] = []
        self._lookups: dict[str, FileLookup] = {}

    def lookup(self, campaign: CampaignResults) -> FileLookup:
        if campaign.name not in self._lookups:
            self._lookups[campaign.name] = FileLookup([r for r in self.runs if r.campaign == campaign.name])
        return self._lookups[campaign.name]

    def _make_env(self) -> jinja2.Environment:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.templates_dir)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,  # Markdown out, not HTML; values are numbers we format ourselves
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(
            num=fmt.fmt_num,
            int=fmt.fmt_int,
            pct=fmt.fmt_pct,
            spct=fmt.fmt_signed_pct,
            fpct=fmt.fmt_fraction_pct,
            bytes=fmt.fmt_bytes,
            value=fmt.fmt_value,
            status_class=status_class,
            round_zh=lambda r: labels_zh.ROUNDS.get(r, r),
            engine_zh=lambda e: labels_zh.ENGINES.get(e, e),
            column_zh=lambda c: labels_zh.COLUMNS.get(c, c),
            unit_zh=labels_zh.unit_zh,
        )
        env.globals.update(markdown_table=markdown_table, format_cell=format_cell, file_anchor=file_anchor)
        return env

    # output folder ---------------------------------------------------------------------------------------
    def _prepare_out(self) -> None:
        if self.out.exists() and any(self.out.iterdir()) and not (self.out / MARKER).exists():
            raise RenderError(f"{self.out}: exists, is not empty and was not written by the renderer; not touching it")
        if self.out.exists():
            shutil.rmtree(self.out)
        self.out.mkdir(parents=True)
        (self.out / MARKER).write_text("generated; emptied on every render\n")
        if self.handwritten_dir and Path(self.handwritten_dir).is_dir():
            shutil.copytree(self.handwritten_dir, self.out, dirs_exist_ok=True)
        if self.assets_dir and Path(self.assets_dir).is_dir():
            shutil.copytree(self.assets_dir, self.out / "assets", dirs_exist_ok=True)

    def _write(self, page: Page) -> None:
        target = self.out / page.path
        if target.exists():
            raise RenderError(f"{page.path}: rendered page would overwrite a hand-written page of the same path")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page.text, encoding="utf-8")
        self.report.pages.append(page.path)

    def write_figure(self, campaign: CampaignResults, name: str, page_path: str, title: str | None) -> str:
        """Render the spec to ``<page dir>/figures/<name>.svg`` once; return the link relative to the page."""
        page_dir = Path(page_path).parent
        svg_rel = (page_dir / "figures" / (name.replace("/", "--") + ".svg")).as_posix()
        cache_key = (campaign.name, name, svg_rel)
        if cache_key not in self._figures_written:
            spec = figs.load_spec(campaign.figures[name])
            spec = figs.prepare_spec(spec, title)
            problems = figs.check_publishable(spec, f"{campaign.name}/{name}")
            if problems:
                raise RenderError("; ".join(problems))
            svg = figs.spec_to_svg(spec)
            target = self.out / svg_rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(svg, encoding="utf-8")
            self._figures_written[cache_key] = svg_rel
            self.report.figures.append(svg_rel)
        return Path(_relpath(svg_rel, page_dir.as_posix())).as_posix()

    def render_template(self, template: str, page_path: str, campaign: CampaignResults | None, **data: Any) -> Page:
        ctx = PageContext(self, page_path, campaign)
        try:
            tmpl = self.env.get_template(template)
            text = tmpl.render(
                ctx=ctx,
                f=ctx.f,
                has=ctx.has,
                keys=ctx.keys,
                t=ctx.t,
                has_table=ctx.has_table,
                table=ctx.table,
                figure=ctx.figure,
                has_figure=ctx.has_figure,
                link=ctx.link,
                campaign=campaign,
                **data,
            )
        except jinja2.UndefinedError as err:
            raise RenderError(f"{template} → {page_path}: {err.message}") from err
        except RenderError as err:
            raise RenderError(f"{template}: {err}") from err
        return Page(page_path, text)

    # the site -------------------------------------------------------------------------------------------
    def render(self) -> RenderReport:
        self._prepare_out()
        campaign_dirs = discover_campaigns(self.results_dir)
        if self.only:
            campaign_dirs = [d for d in campaign_dirs if d.name in self.only]
        campaigns = [load_campaign(d) for d in campaign_dirs]
        if not campaigns:
            raise RenderError(f"{self.results_dir}: no campaign with a findings.json (run `collector analyze`)")
        runs = self.runs = index_runs(self.raw_roots)
        site_mod = self.env.get_template("_site.j2").module  # section names (Chinese) live in a template
        nav: list[Any] = []

        structure_entries = []
        for c in campaigns:
            path = f"structure/{c.name}.md"
            page = self.render_template("structure.md.j2", path, c, campaigns=campaigns)
            self._write(page)
            structure_entries.append({page.title: path})
        campaign_navs = []
        for c in campaigns:
            c_runs = [r for r in runs if r.campaign == c.name]
            unmatched = link_findings(c_runs, c.findings)
            for u in unmatched:
                if (REPO_ROOT / u).is_file():  # a file of this repository (bundled model config), not raw data
                    continue
                self.report.notes.append(f"{c.name}: cited source {u!r} matches no raw file")
            rendered: dict[str, Page] = {}
            # The overview goes last: it lists the findings that no other page shows.
            for slug, template in [*CAMPAIGN_PAGES[1:], CAMPAIGN_PAGES[0]]:
                path = f"campaigns/{c.name}/{slug}.md"
                page = self.render_template(template, path, c, runs=c_runs, all_campaigns=campaigns)
                self._write(page)
                rendered[slug] = page
            entries = [{rendered[slug].title: rendered[slug].path} for slug, _ in CAMPAIGN_PAGES]
            campaign_navs.append((c, entries))

        home = self.render_template("home.md.j2", "index.md", None, campaigns=campaigns, runs=runs)
        self._write(home)
        nav.append({home.title: "index.md"})

        nav.append({site_mod.nav_structure: structure_entries})

        for _c, entries in campaign_navs:
            nav.append({_title_of(entries[0]): entries})

        data_entries = []
        for c in campaigns:
            path = f"data/{c.name}.md"
            c_runs = [r for r in runs if r.campaign == c.name]
            page = self.render_template("raw_index.md.j2", path, c, runs=c_runs, raw_files=_files_of(c_runs))
            self._write(page)
            data_entries.append({page.title: path})
        other_runs = [r for r in runs if r.campaign not in {c.name for c in campaigns}]
        if other_runs:
            for name in sorted({r.campaign for r in other_runs}):
                path = f"data/{name}.md"
                c_runs = [r for r in other_runs if r.campaign == name]
                page = self.render_template(
                    "raw_index.md.j2", path, None, runs=c_runs, raw_files=_files_of(c_runs), campaign_name=name
                )
                self._write(page)
                data_entries.append({page.title: path})
                self.report.notes.append(f"{name}: raw runs without analysis results (listed in the data index)")

        method_entries = []
        for rel in site_mod.handwritten_pages:
            p = self.out / rel
            if not p.exists():
                raise RenderError(f"{p}: hand-written page listed in _site.j2 is missing")
            method_entries.append({Page(rel, p.read_text(encoding="utf-8")).title: rel})
        nav.append({site_mod.nav_method: method_entries})
        nav.append({site_mod.nav_data: data_entries})

        for c in campaigns:
            unused = sorted(set(c.figures) - {k[1] for k in self._figures_written if k[0] == c.name})
            for u in unused:
                self.report.notes.append(f"{c.name}: figure {u!r} is on no page")
        (self.out / NAV_FILE).write_text(json.dumps(nav, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        return self.report


def _title_of(entry: dict[str, str]) -> str:
    return next(iter(entry))


def _files_of(runs: list[RawRun]):
    return [f for r in runs for f in r.files]


def render_site(
    results_dir: Path,
    raw_roots: list[Path],
    out_docs_dir: Path,
    campaigns: list[str] | None = None,
    templates_dir: Path = TEMPLATES_DIR,
    on_line: Callable[[str], None] | None = None,
) -> RenderReport:
    """Render every page into ``out_docs_dir`` (emptied first; only a folder the renderer made is emptied)."""
    renderer = SiteRenderer(results_dir, raw_roots, out_docs_dir, templates_dir=templates_dir, campaigns=campaigns)
    report = renderer.render()
    if on_line:
        for line in report.lines():
            on_line(line)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m analysis.report.render`` (or ``python site/render.py``): render the pages, print a summary."""
    import argparse
    import sys
    import time

    from analysis.parse.errors import ParseError

    ap = argparse.ArgumentParser(description="Render the Chinese report pages from the analysis output.")
    ap.add_argument("--results", type=Path, default=REPO_ROOT / "build" / "results", help="collector analyze output")
    ap.add_argument("--raw", type=Path, action="append", help="raw store root(s) for the data index (repeatable)")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "site" / "docs", help="MkDocs docs_dir")
    ap.add_argument("--quiet", action="store_true", help="print only the summary line")
    ap.add_argument("campaigns", nargs="*", help="only these campaigns (default: all with results)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    try:
        report = render_site(args.results, args.raw or [REPO_ROOT / "raw"], args.out, campaigns=args.campaigns or None)
    except (RenderError, ParseError) as err:
        print(f"render: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    lines = report.lines()
    for line in lines[-1:] if args.quiet else lines:
        print(line)
    print(f"render: {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
