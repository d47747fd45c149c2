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
from analysis.findings import Finding, FindingSet
from analysis.model_config import load_model_config
from analysis.report import figures as figs
from analysis.report.profile import CampaignProfile, Series, build_profile, format_label
from analysis.report.rawindex import FileLookup, RawFile, RawRun, index_runs, link_findings
from analysis.report.results import (
    CampaignResults,
    RenderError,
    Table,
    discover_campaigns,
    load_campaign,
    load_comparison,
    source_file,
    source_path,
)
from collector.raw.errors import AnatomyError

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES_DIR = REPO_ROOT / "site" / "templates"
HANDWRITTEN_DIR = REPO_ROOT / "site" / "docs"
ASSETS_DIR = REPO_ROOT / "site" / "assets"
NAV_FILE = ".nav.json"
HANDWRITTEN_PAGES = (
    "methodology.md",
    "glossary.md",
)  # site/docs pages, in the order of the nav's method section
# The reference campaign (someone else's RTX 4090 measurements, imported at build time, never committed).
REFERENCE_CAMPAIGN = "rtx4090-qwen2.5-7b"
FIGURES_FILE = ".figures.json"
PER_WORKER_MIN = 12  # a worker process costs ~1 s to start (Python, vl-convert, fonts): only for many figures  # figures a page deliberately leaves out, and why (a dot file: never published)
MARKER = ".rendered-by-analysis-report"  # only a folder carrying it is ever emptied by the renderer

# Campaign pages in reading order: (slug, template, needs). The page title is the template's first "# " line.
# ``needs`` says whether the campaign has the data the page is about (a CPU smoke campaign has no rounds to
# compare, a llama.cpp-only campaign no engine crossover ...); a page without its data is not rendered, and its
# findings are listed on the campaign's overview instead, so no finding is ever dropped.


def _has_rows(c: CampaignResults, table: str, **where: Any) -> bool:
    t = c.tables.get(table)
    return t is not None and len(t.where(**where) if where else t) > 0


def _always(_c: CampaignResults) -> bool:
    return True


CAMPAIGN_PAGES: tuple[tuple[str, str, Callable[[CampaignResults], bool]], ...] = (
    ("index", "campaign/overview.md.j2", _always),
    (
        "concurrency",
        "campaign/concurrency.md.j2",
        lambda c: _has_rows(c, "points", test_kind="concurrency_sweep"),
    ),
    ("ttft", "campaign/ttft.md.j2", lambda c: _has_rows(c, "ttft_anatomy")),
    ("kv", "campaign/kv.md.j2", lambda c: any(_has_rows(c, t) for t in ("kv_pool", "capacity", "kv_fit"))),
    ("overload", "campaign/overload.md.j2", lambda c: _has_rows(c, "points", test_kind="overload")),
    (
        "engines",
        "campaign/engines.md.j2",
        lambda c: _has_rows(c, "engines_points") or _has_rows(c, "roofline_points"),
    ),
    ("selection", "campaign/selection.md.j2", lambda c: _has_rows(c, "selection_guide")),
    (
        "reproducibility",
        "campaign/reproducibility.md.j2",
        lambda c: _has_rows(c, "reproducibility") or _has_rows(c, "reproducibility_changes"),
    ),
    ("gates", "campaign/gates.md.j2", lambda c: _has_rows(c, "gates")),
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
    """A table cell by the unit its column name carries (labels_zh.cell_text)."""
    return labels_zh.cell_text(column, value)


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: list[str], rows: Iterable[list[str]], align: list[str] | None = None) -> str:
    rows = list(rows)
    align = align or ["---"] + ["--:"] * (len(headers) - 1)
    lines = ["| " + " | ".join(_md_escape(h) for h in headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    # a blank line before and after: Markdown reads a table only as a block of its own
    return "\n" + "\n".join(lines) + "\n\n"


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
        return PageContext(self.site, self.page_path, campaign)

    @property
    def profile(self) -> CampaignProfile:
        if self.campaign is None or self.campaign.name not in self.site.profiles:
            raise RenderError(f"{self.page_path}: this page has no campaign profile")
        return self.site.profiles[self.campaign.name]

    def series(self) -> list[Series]:
        return self.profile.series

    def engine_zh(self, engine: str) -> str:
        """The engine's Chinese label in this campaign (with its weight format when it ran only one)."""
        if self.campaign is not None and self.campaign.name in self.site.profiles:
            return self.profile.engine_label(engine)
        return labels_zh.ENGINES.get(engine, engine)

    # findings: selected by their fields (analysis.keys.At), never by their key
    def _findings(self) -> FindingSet:
        if self.campaign is None:
            raise RenderError(f"{self.page_path}: this page has no campaign; findings are per campaign")
        return self.campaign.findings

    def _known(self, topic: str | None, metric: str) -> None:
        """A metric no campaign has and the labels do not know is a typo or a renamed finding: fail."""
        if (topic, metric) not in labels_zh.FINDINGS and (topic, metric) not in self.site.known_metrics:
            raise RenderError(f"{self.page_path}: no campaign has a finding {metric!r} (topic {topic!r})")

    def find(self, metric: str, topic: str | None = None, **query: Any) -> Finding | None:
        """The finding with these fields, None where this campaign does not have it."""
        self._known(topic, metric)
        try:
            return self._findings().find(metric=metric, topic=topic, **query)
        except LookupError as err:
            raise RenderError(f"{self.page_path}: {err}") from err

    def get(self, metric: str, topic: str | None = None, **query: Any) -> Finding:
        """The finding with these fields; a campaign without it fails the build, naming what is missing."""
        found = self.find(metric, topic, **query)
        if found is None:
            raise RenderError(
                f"{self.page_path}: campaign {self.campaign.name} has no finding "  # type: ignore[union-attr]
                f"{dict(metric=metric, topic=topic, **query)}"
            )
        return found

    def latest(self, metric: str, topic: str | None = None, **query: Any) -> Finding | None:
        """The finding of the newest round (a campaign without rounds: its only one)."""
        return self.find(metric, topic, round=self.campaign.latest_round, **query)  # type: ignore[union-attr]

    def of(self, series: Series, metric: str, topic: str | None = None) -> Finding | None:
        """One series' finding: our own campaigns' by run, an imported campaign's by round and engine."""
        return self.find(metric, topic, **series.select)

    def findings(self, **query: Any) -> list[Finding]:
        """Every finding with these fields (``topic`` counts even when not given: see analysis.keys.matches)."""
        return self._findings().select(**query)

    def unshown_figures(self) -> list[str]:
        """Figures of this campaign that no page rendered so far shows (nor deliberately left out)."""
        name = self.campaign.name  # type: ignore[union-attr]
        shown = {k[1] for k in self.site._figures_written if k[0] == name}
        left_out = set(self.site.figures_left_out.get(name, {}))
        return [n for n in sorted(self.campaign.figures) if n not in shown and n not in left_out]  # type: ignore[union-attr]

    def leave_out_figure(self, name: str, reason: str) -> str:
        """Record that this page deliberately does not show a figure the analysis made (with why, for the
        render report and the tests); returns "" so a template can call it inline."""
        if self.has_figure(name):
            self.site.figures_left_out.setdefault(self.campaign.name, {})[name] = reason  # type: ignore[union-attr]
            self.site.report.notes.append(f"{self.campaign.name}: figure {name!r} left out: {reason}")  # type: ignore[union-attr]
        return ""

    def unshown(self) -> list[Finding]:
        """Findings of this campaign that no page rendered so far has shown."""
        name = self.campaign.name  # type: ignore[union-attr]
        return [f for f in self._findings() if (name, f.key) not in self.site.finding_pages]

    def per_round(self, queries: list[dict[str, Any]]) -> list[tuple[str | None, list[Finding]]]:
        """For each round, the findings each query selects, in the order of the queries."""
        for q in queries:
            self._known(q.get("topic"), q["metric"])
        rounds = list(self.campaign.rounds) or [None]  # type: ignore[union-attr]
        out = []
        for r in rounds:
            hits: list[Finding] = []
            for q in queries:
                hits += [f for f in self.findings(**{"round": r, **q}) if f not in hits]
            out.append((r, hits))
        return out

    # tables
    def t(self, name: str) -> Table:
        if self.campaign is None or name not in self.campaign.tables:
            have = ", ".join(sorted(self.campaign.tables)) if self.campaign else "none"
            raise RenderError(f"{self.page_path}: no table {name!r} in the results (have: {have})")
        return self.campaign.tables[name]

    def rounds(self) -> list[tuple[str, str]]:
        """``[(round, key prefix)]``: ``[("round1", "round1."), …]``, or ``[("", "")]`` for a campaign without rounds."""
        return [(r, r + ".") for r in self.campaign.rounds] or [("", "")]  # type: ignore[union-attr]

    def by_round(self, name: str | Table, **where: Any) -> list[tuple[str, Table]]:
        """The table's rows per round, rounds without rows left out (one untitled group without rounds)."""
        tab = name if isinstance(name, Table) else self.t(name)
        if where:
            tab = tab.where(**where)
        if not self.campaign.rounds:  # type: ignore[union-attr]
            return [("", tab)] if len(tab) else []
        return [(r, tab.where(round=r)) for r in self.campaign.rounds if len(tab.where(round=r))]  # type: ignore[union-attr]

    def groups(self, name: str | Table, columns: list[str], **where: Any) -> list[dict[str, Any]]:
        """The distinct values of ``columns`` in the table's row order (one dict per group)."""
        tab = name if isinstance(name, Table) else self.t(name)
        if where:
            tab = tab.where(**where)
        out: list[dict[str, Any]] = []
        for row in tab.rows:
            g = {c: row.get(c) for c in columns}
            if g not in out:
                out.append(g)
        return out

    def rows_in(self, name: str | Table, column: str, values: Iterable[Any]) -> Table:
        """The rows whose ``column`` is one of ``values`` (the comparison page keeps the GPU campaigns)."""
        tab = name if isinstance(name, Table) else self.t(name)
        keep = set(values)
        return Table(tab.name, tab.path, tab.columns, [r for r in tab.rows if r.get(column) in keep])

    def has_table(self, name: str) -> bool:
        return (
            self.campaign is not None and name in self.campaign.tables and len(self.campaign.tables[name]) > 0
        )

    def table(
        self,
        name: str | Table,
        columns: list[Any],
        where: dict[str, Any] | None = None,
        relabel: dict[str, dict[Any, str]] | None = None,
        optional: list[str] | None = None,
    ) -> str:
        """A markdown table of chosen columns: ``columns`` = [(column, header), …] with headers from the template.

        ``relabel`` maps a column's raw values to words (from the template, e.g. gate statuses). Text columns
        are left-aligned, numeric ones right-aligned. Columns named in ``optional`` are left out where the table
        lacks them or has no value in them (a measured ceiling that only some campaigns have).
        """
        tab = name if isinstance(name, Table) else self.t(name)
        if where:
            tab = tab.where(**where)
        # A bare column name takes its Chinese header from labels_zh.COLUMNS.
        cols: list[tuple[str, str]] = [
            tuple(c) if not isinstance(c, str) else (c, labels_zh.COLUMNS.get(c, c))
            for c in columns  # type: ignore[misc]
        ]
        if optional:
            cols = [
                (c, h)
                for c, h in cols
                if c not in optional or (c in tab.columns and any(r.get(c) is not None for r in tab.rows))
            ]
        for col, _ in cols:
            if col not in tab.columns:
                raise RenderError(
                    f"{self.page_path}: table {tab.name!r} has no column {col!r} (has: {', '.join(tab.columns)})"
                )
        if not tab.rows:
            raise RenderError(
                f"{self.page_path}: table {tab.name!r} has no rows{' for ' + str(where) if where else ''}"
            )
        relabel = relabel or {}

        def cell(col: str, value: Any) -> str:
            if col in relabel and value in relabel[col]:
                return relabel[col][value]
            if col == "engine" and isinstance(value, str):
                return self.engine_zh(value)
            if col == "weight_format" and isinstance(value, str):
                return format_label(value)
            if col == "series_key" and isinstance(value, str):
                return self.site.series_labels.get(value, value)
            return format_cell(col, value)

        body = [[cell(col, row[col]) for col, _ in cols] for row in tab.rows]
        numeric = [
            all(
                isinstance(r[col], (int, float)) and not isinstance(r[col], bool)
                for r in tab.rows
                if r[col] is not None
            )
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
        title = (
            title
            or figs.spec_title(figs.load_spec(self.campaign.figures[name]))
            or labels_zh.FIGURES.get(name.rsplit("/", 1)[-1], {}).get("title")
        )
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

    def finding_anchor(self, finding: Finding) -> str:
        """The HTML id of a finding's row on this page; the first page that shows a finding is its home."""
        if self.campaign is not None:
            self.site.finding_pages.setdefault((self.campaign.name, finding.key), self.page_path)
        return anchor_of(finding.key)

    def finding_link(self, key: str) -> str:
        """A link, labelled in Chinese, to the page (and row) where a finding is shown; raises if none does."""
        if self.campaign is None:
            raise RenderError(f"{self.page_path}: finding links need a campaign")
        home = self.site.finding_pages.get((self.campaign.name, key))
        if home is None:
            raise RenderError(f"{self.page_path}: finding {key!r} is shown on no page")
        label = labels_zh.finding_label(self.campaign.findings[key])
        return f"[{label}]({self.link(home)}#{anchor_of(key)})"

    # citations
    def _find(self, cited: str) -> RawFile | None:
        """The raw file a citation names. The comparison cites ``<campaign>/<path>``: look in that campaign."""
        if self.campaign is None:
            return None
        head, _, rest = cited.partition("/")
        if rest and head in self.site.campaign_names and head != self.campaign.name:
            return self.site.lookup_name(head).find(rest)
        return self.site.lookup(self.campaign).find(cited)

    def source_link(self, source: Any) -> str:
        """A finding's citation as a link to its file's row in the raw-data index of the campaign."""
        text = source_path(source)
        hit = self._find(source_file(source))
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
            hit = self._find(file_part)
            text = (
                f"[{short}]({self.link(f'data/{hit.campaign}.md')}#{file_anchor(hit.run, hit.rel)})"
                if hit
                else short
            )
            if details:
                text += " :" + ", ".join(details)
            parts.append(f'<span class="ia-src">{text}</span>')
        return sep.join(parts) or labels_zh.MISSING

    # links
    def page_link(self, target: str, fallback: str) -> str:
        """A link to ``target`` if that page was rendered, else to ``fallback`` (a page without its data is not)."""
        return self.link(target if target in self.site.report.pages else fallback)

    def link(self, target: str) -> str:
        """A relative link from this page to another page (both relative to docs_dir)."""
        here = Path(self.page_path).parent
        return Path(_relpath(target, here.as_posix())).as_posix()


def anchor_of(key: str) -> str:
    """The HTML id of a finding's row (stable, ASCII): the key as an id, never read back."""
    return "f-" + re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")


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
        self.profiles: dict[str, CampaignProfile] = {}
        self.known_metrics: set[tuple[str | None, str]] = set()  # (topic, metric) over every campaign
        self.series_labels: dict[str, str] = {}  # comparison series id -> Chinese label
        self.campaign_names: set[str] = set()
        self.comparison: CampaignResults | None = None
        self.figures_left_out: dict[str, dict[str, str]] = {}  # campaign -> figure -> why
        self._figures_pending: dict[str, dict[str, Any]] = {}  # svg path (relative to out) -> prepared spec

    def lookup(self, campaign: CampaignResults) -> FileLookup:
        return self.lookup_name(campaign.name)

    def lookup_name(self, name: str) -> FileLookup:
        if name not in self._lookups:
            self._lookups[name] = FileLookup([r for r in self.runs if r.campaign == name])
        return self._lookups[name]

    def raw_path(self, campaign: str, cited: str) -> Path | None:
        """The file on disk behind a citation: a raw file of the campaign, or a file of this repository."""
        hit = self.lookup_name(campaign).find(cited)
        if hit is not None and hit.path is not None:
            return hit.path
        repo_file = REPO_ROOT / cited
        return repo_file if repo_file.is_file() else None

    def model_config(self, campaign: CampaignResults) -> Any:
        """The model config the theory was computed from: the file ``model.params_total`` cites, read by the
        analysis' own parser (the structure page shows the inputs of its derivations). None if not found."""
        found = campaign.findings.find(topic="model", metric="params_total")
        for src in found.sources if found else ():
            path = self.raw_path(campaign.name, source_file(src))
            if path is None or path.suffix != ".json":
                continue
            try:
                return load_model_config(path)
            except AnatomyError:
                continue
        return None

    def _make_env(self) -> jinja2.Environment:
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.templates_dir)),
            undefined=jinja2.StrictUndefined,
            autoescape=False,  # Markdown out, not HTML; values are numbers we format ourselves
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        zh = labels_zh
        env.filters.update(
            # numbers
            num=zh.fmt_num,
            int=zh.fmt_int,
            pct=zh.fmt_pct,
            spct=zh.fmt_signed_pct,
            fpct=zh.fmt_fraction_pct,
            bytes=zh.fmt_bytes,
            # a finding, formatted
            value=zh.value_text,
            theory=zh.theory_text,
            error=zh.error_text,
            tolerance=zh.tolerance_text,
            label=zh.finding_label,
            status_zh=zh.status_text,
            reason_zh=zh.reason_text,
            # names
            round_zh=zh.round_label,
            engine_zh=lambda e: zh.ENGINES.get(e, e),
            engine_name=zh.engine_name,
            format_zh=zh.format_label,
            column_zh=lambda c: zh.COLUMNS.get(c, c),
            unit_zh=zh.unit_zh,
        )
        env.globals.update(
            markdown_table=markdown_table,
            format_cell=format_cell,
            file_anchor=file_anchor,
            series_label=zh.series_label,
            fmt_value=zh.fmt_value,
        )
        return env

    # output folder ---------------------------------------------------------------------------------------
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

    def _write(self, page: Page) -> None:
        target = self.out / page.path
        if target.exists():
            raise RenderError(
                f"{page.path}: rendered page would overwrite a hand-written page of the same path"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page.text, encoding="utf-8")
        self.report.pages.append(page.path)

    def write_figure(self, campaign: CampaignResults, name: str, page_path: str, title: str | None) -> str:
        """Render the spec to ``<page dir>/figures/<name>.svg`` once; return the link relative to the page."""
        page_dir = Path(page_path).parent
        # Pages of several campaigns share a folder (structure/): there each campaign gets its own sub-folder.
        mine = page_dir.parts[-1:] == (campaign.name,)
        folder = page_dir / "figures" if mine else page_dir / "figures" / campaign.name
        svg_rel = (folder / (name.replace("/", "--") + ".svg")).as_posix()
        cache_key = (campaign.name, name, svg_rel)
        if cache_key not in self._figures_written:
            spec = figs.load_spec(campaign.figures[name])
            spec = figs.prepare_spec(spec, title)
            problems = figs.check_publishable(spec, f"{campaign.name}/{name}")
            if problems:
                raise RenderError("; ".join(problems))
            # Converted all at once when the pages are done (see _convert_figures): in parallel.
            self._figures_pending[svg_rel] = spec
            self._figures_written[cache_key] = svg_rel
            self.report.figures.append(svg_rel)
        return Path(_relpath(svg_rel, page_dir.as_posix())).as_posix()

    def _convert_figures(self) -> None:
        """Every figure the pages use, spec → SVG. vl-convert holds the GIL for ~0.3 s a figure, so a site of
        a few campaigns (40+ figures) is converted in worker processes, one per core (spawned: the converter
        runs threads of its own, which a fork would not carry over safely)."""
        import multiprocessing
        import os
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        jobs = sorted(self._figures_pending.items())
        workers = min(os.cpu_count() or 1, 4, max(1, len(jobs) // PER_WORKER_MIN))
        svgs: list[str] | None = None
        if workers > 1:
            try:
                with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                    svgs = list(pool.map(figs.spec_to_svg, [spec for _, spec in jobs]))
            except BrokenProcessPool:
                # a caller whose __main__ a spawned worker cannot re-import (python -c, stdin): do it here
                svgs = None
        if svgs is None:
            svgs = [figs.spec_to_svg(spec) for _, spec in jobs]
        for (rel, _), svg in zip(jobs, svgs, strict=True):
            target = self.out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(svg, encoding="utf-8")
        self._figures_pending.clear()

    def render_template(
        self, template: str, page_path: str, campaign: CampaignResults | None, **data: Any
    ) -> Page:
        ctx = PageContext(self, page_path, campaign)
        try:
            tmpl = self.env.get_template(template)
            text = tmpl.render(
                ctx=ctx,
                get=ctx.get if campaign is not None else None,
                find=ctx.find if campaign is not None else None,
                t=ctx.t,
                has_table=ctx.has_table,
                table=ctx.table,
                figure=ctx.figure,
                has_figure=ctx.has_figure,
                link=ctx.link,
                latest=ctx.latest if campaign is not None else None,
                campaign=campaign,
                **data,
            )
        except jinja2.UndefinedError as err:
            raise RenderError(f"{template} → {page_path}: {err.message}") from err
        except RenderError as err:
            raise RenderError(f"{template}: {err}") from err
        return Page(page_path, text)

    # the site -------------------------------------------------------------------------------------------
    def _load(self) -> list[CampaignResults]:
        campaign_dirs = discover_campaigns(self.results_dir)
        if self.only:
            campaign_dirs = [d for d in campaign_dirs if d.name in self.only]
        campaigns = [load_campaign(d) for d in campaign_dirs]
        if not campaigns:
            raise RenderError(
                f"{self.results_dir}: no campaign with a findings.json (run `collector analyze`)"
            )
        self.campaign_names = {c.name for c in campaigns}
        for c in campaigns:
            self.known_metrics |= {(f.topic, f.metric) for f in c.findings}
        comparison = load_comparison(self.results_dir)
        gpu_display: dict[str, tuple[str, str]] = {}
        if comparison is not None and "comparison_series" in comparison.tables:
            for row in comparison.tables["comparison_series"].rows:
                self.series_labels[str(row["series_key"])] = labels_zh.series_label(
                    str(row["engine"]), row.get("weight_format")
                )
                if row.get("gpu"):
                    gpu_display.setdefault(
                        str(row["campaign"]), (str(row["gpu"]), str(row.get("gpu_display") or ""))
                    )
        reference = REFERENCE_CAMPAIGN
        for c in campaigns:
            self.profiles[c.name] = build_profile(c, self.runs, reference, gpu_display)
        campaigns.sort(key=lambda c: self.profiles[c.name].sort_key)
        # The comparison page compares GPUs: it needs two analysed GPU campaigns among those rendered.
        gpu_campaigns = [c for c in campaigns if not self.profiles[c.name].cpu and self.profiles[c.name].gpu]
        if comparison is not None and len(gpu_campaigns) >= 2:
            self.comparison = comparison
        elif comparison is not None:
            self.report.notes.append("comparison: fewer than two GPU campaigns, no comparison page")
        return campaigns

    def render(self) -> RenderReport:
        self._prepare_out()
        self.runs = index_runs(self.raw_roots)
        campaigns = self._load()
        runs = self.runs
        nav_zh = labels_zh.NAV
        short_name = self.env.get_template("_campaigns.j2").module.short  # a campaign's name: template prose
        nav: list[Any] = []
        common = {
            "campaigns": campaigns,
            "profiles": self.profiles,
            "comparison": self.comparison,
            "reference_campaign": REFERENCE_CAMPAIGN,
        }

        structure_entries = []
        for c in campaigns:
            path = f"structure/{c.name}.md"
            page = self.render_template(
                "structure.md.j2", path, c, model_config=self.model_config(c), **common
            )
            self._write(page)
            structure_entries.append({page.title: path})
        campaign_navs = []
        for c in campaigns:
            c_runs = [r for r in runs if r.campaign == c.name]
            unmatched = link_findings(c_runs, c.findings)
            for u in unmatched:
                if (
                    REPO_ROOT / u
                ).is_file():  # a file of this repository (bundled model config), not raw data
                    continue
                self.report.notes.append(f"{c.name}: cited source {u!r} matches no raw file")
            pages = [
                (slug, template) for slug, template, *needs in CAMPAIGN_PAGES if not needs or needs[0](c)
            ]
            skipped = [slug for slug, _t, *needs in CAMPAIGN_PAGES if needs and not needs[0](c)]
            if skipped:
                self.report.notes.append(f"{c.name}: no data for pages {', '.join(skipped)}")
            slugs = [slug for slug, _ in pages]
            rendered: dict[str, Page] = {}
            # The overview goes last: it lists the findings and figures that no other page shows.
            for slug, template in [*pages[1:], pages[0]]:
                path = f"campaigns/{c.name}/{slug}.md"
                page = self.render_template(
                    template, path, c, runs=c_runs, all_campaigns=campaigns, page_slugs=slugs, **common
                )
                self._write(page)
                rendered[slug] = page
            entries = [{rendered[slug].title: rendered[slug].path} for slug, _ in pages]
            campaign_navs.append((c, entries))

        comparison_entry = None
        if self.comparison is not None:
            page = self.render_template(
                "comparison.md.j2", "comparison.md", self.comparison, runs=runs, **common
            )
            self._write(page)
            comparison_entry = {nav_zh["comparison"]: page.path}

        home = self.render_template("home.md.j2", "index.md", None, runs=runs, **common)
        self._write(home)
        nav.append({home.title: "index.md"})

        for c, entries in campaign_navs:
            nav.append({str(short_name(self.profiles[c.name])).strip(): entries})
        if comparison_entry:
            nav.append(comparison_entry)
        nav.append({nav_zh["structure"]: structure_entries})

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
                    "raw_index.md.j2",
                    path,
                    None,
                    runs=c_runs,
                    raw_files=_files_of(c_runs),
                    campaign_name=name,
                )
                self._write(page)
                data_entries.append({page.title: path})
                self.report.notes.append(
                    f"{name}: raw runs without analysis results (listed in the data index)"
                )

        method_entries = []
        for rel in HANDWRITTEN_PAGES:
            p = self.out / rel
            if not p.exists():
                raise RenderError(f"{p}: hand-written page listed in HANDWRITTEN_PAGES is missing")
            method_entries.append({Page(rel, p.read_text(encoding="utf-8")).title: rel})
        nav.append({nav_zh["method"]: method_entries})
        nav.append({nav_zh["data"]: data_entries})

        self._convert_figures()
        (self.out / FIGURES_FILE).write_text(
            json.dumps({"left_out": self.figures_left_out}, ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8",
        )
        for c in [*campaigns, *([self.comparison] if self.comparison else [])]:
            shown = {k[1] for k in self._figures_written if k[0] == c.name}
            unused = sorted(set(c.figures) - shown - set(self.figures_left_out.get(c.name, {})))
            for u in unused:
                self.report.notes.append(f"{c.name}: figure {u!r} is on no page")
        (self.out / NAV_FILE).write_text(
            json.dumps(nav, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
        )
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
    renderer = SiteRenderer(
        results_dir, raw_roots, out_docs_dir, templates_dir=templates_dir, campaigns=campaigns
    )
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

    ap = argparse.ArgumentParser(description="Render the Chinese report pages from the analysis output.")
    ap.add_argument(
        "--results", type=Path, default=REPO_ROOT / "build" / "results", help="collector analyze output"
    )
    ap.add_argument(
        "--raw", type=Path, action="append", help="raw store root(s) for the data index (repeatable)"
    )
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "site" / "docs", help="MkDocs docs_dir")
    ap.add_argument("--quiet", action="store_true", help="print only the summary line")
    ap.add_argument("campaigns", nargs="*", help="only these campaigns (default: all with results)")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    try:
        report = render_site(
            args.results, args.raw or [REPO_ROOT / "raw"], args.out, campaigns=args.campaigns or None
        )
    except AnatomyError as err:
        print(f"render: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    lines = report.lines()
    for line in lines[-1:] if args.quiet else lines:
        print(line)
    print(f"render: {args.out} in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
