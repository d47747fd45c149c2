"""What a template sees: ``ctx``, the page context — findings picked by their fields, tables, figures,
citations and links — and the site-wide state the pages share (which page shows which finding, the figures
placed so far, the campaigns' profiles and raw files).

Every lookup raises RenderError when the results cannot answer it: a placeholder the results cannot fill fails
the build with the template and what is missing, instead of publishing a blank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import jinja2

from analysis.core import labels_zh
from analysis.core.findings import Finding
from analysis.report.figures import FigureSet, downloads_of, load_spec, spec_title
from analysis.report.markdown import Page, anchor_of, file_anchor, markdown_table, md_escape, relative_link
from analysis.report.profile import CampaignProfile, Series
from analysis.report.rawindex import FileLookup, RawFile, RawRun
from analysis.report.results import CampaignResults, RenderError, Table, source_file, source_path


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


@dataclass
class SiteState:
    """What the pages of one site share."""

    env: jinja2.Environment
    report: RenderReport = field(default_factory=RenderReport)
    figures: FigureSet = field(default_factory=FigureSet)
    profiles: dict[str, CampaignProfile] = field(default_factory=dict)
    runs: dict[str, list[RawRun]] = field(default_factory=dict)  # campaign -> its raw runs and files
    finding_pages: dict[tuple[str, str], str] = field(default_factory=dict)  # (campaign, key) -> first page
    known_metrics: set[tuple[str | None, str]] = field(default_factory=set)  # (topic, metric), every campaign
    series_labels: dict[str, str] = field(default_factory=dict)  # comparison series id -> Chinese label
    campaign_names: set[str] = field(default_factory=set)
    # every page the site will have, known before the first is rendered: a page links to one rendered later
    planned_pages: set[str] = field(default_factory=set)
    _lookups: dict[str, FileLookup] = field(default_factory=dict)

    def lookup(self, campaign: str) -> FileLookup:
        if campaign not in self._lookups:
            self._lookups[campaign] = FileLookup(self.runs.get(campaign, []))
        return self._lookups[campaign]


class PageContext:
    """Helpers bound to one page (and, on most pages, one campaign's results)."""

    def __init__(self, site: SiteState, page_path: str, campaign: CampaignResults | None):
        self.site = site
        self.page_path = page_path
        self.campaign = campaign

    @property
    def c(self) -> CampaignResults:
        if self.campaign is None:
            raise RenderError(
                f"{self.page_path}: this page has no campaign; findings and tables are per campaign"
            )
        return self.campaign

    def for_campaign(self, campaign: CampaignResults) -> PageContext:
        """The same page, looking up another campaign's results (the home page spans campaigns)."""
        return PageContext(self.site, self.page_path, campaign)

    @property
    def profile(self) -> CampaignProfile:
        if self.c.name not in self.site.profiles:
            raise RenderError(f"{self.page_path}: campaign {self.c.name} has no profile")
        return self.site.profiles[self.c.name]

    def series(self) -> list[Series]:
        return self.profile.series

    def engine_zh(self, engine: str) -> str:
        """The engine's Chinese label in this campaign (with its weight format when it ran only one)."""
        if self.campaign is not None and self.campaign.name in self.site.profiles:
            return self.profile.engine_label(engine)
        return labels_zh.ENGINES.get(engine, engine)

    # -- findings: selected by their fields (analysis.core.keys.At), never by their key
    # ---------------------------
    def _known(self, topic: str | None, metric: str) -> None:
        """A metric no campaign has and the labels do not know is a typo or a renamed finding: fail."""
        if (topic, metric) not in labels_zh.FINDINGS and (topic, metric) not in self.site.known_metrics:
            raise RenderError(f"{self.page_path}: no campaign has a finding {metric!r} (topic {topic!r})")

    def find(self, metric: str, topic: str | None = None, **query: Any) -> Finding | None:
        """The finding with these fields, None where this campaign does not have it."""
        self._known(topic, metric)
        try:
            return self.c.findings.find(metric=metric, topic=topic, **query)
        except LookupError as err:
            raise RenderError(f"{self.page_path}: {err}") from err

    def get(self, metric: str, topic: str | None = None, **query: Any) -> Finding:
        """The finding with these fields; a campaign without it fails the build, naming what is missing."""
        found = self.find(metric, topic, **query)
        if found is None:
            want = {"metric": metric, "topic": topic, **query}
            raise RenderError(f"{self.page_path}: campaign {self.c.name} has no finding {want}")
        return found

    def latest(self, metric: str, topic: str | None = None, **query: Any) -> Finding | None:
        """The finding of the newest round (a campaign without rounds: its only one)."""
        return self.find(metric, topic, round=self.c.latest_round, **query)

    def quantization_step_ratio(self) -> Finding | None:
        """The newest single-stream step ratio vLLM ÷ llama.cpp where the two engines read different weight
        bytes per step: only then does it measure what quantization saves (None else)."""
        f = self.latest("single_stream_step_ratio")
        if f is None or not f.available or (f.extra.get("weight_bytes_ratio") or 0) <= 1:
            return None
        return f

    @staticmethod
    def half_model_len_effect(overload: Finding, half: Finding) -> str:
        """What halving ``--max-model-len`` does to the overload's requests: ``rejected`` where one request
        (prompt + output tokens) exceeds the halved limit, ``unchanged`` else (blocks are allocated on
        demand, so the residents do not change)."""
        need = overload.extra["overload_input_len_tokens"] + overload.extra["overload_output_len_tokens"]
        return "rejected" if need > half.extra["max_model_len_tokens"] else "unchanged"

    def of(self, series: Series, metric: str, topic: str | None = None) -> Finding | None:
        """One series' finding: our own campaigns' by run, an imported campaign's by round and engine."""
        return self.find(metric, topic, **series.select)

    def findings(self, **query: Any) -> list[Finding]:
        """Every finding with these fields (``topic`` counts even when not given: see
        analysis.core.keys.matches)."""
        return self.c.findings.select(**query)

    def unavailable(self, round: str | None) -> list[Finding]:
        """The round's n/a findings, every topic (what the campaign could not measure, and why)."""
        return [f for f in self.c.findings if f.round == round and not f.available]

    def per_round(self, queries: list[dict[str, Any]]) -> list[tuple[str | None, list[Finding]]]:
        """For each round, newest first, the findings each query selects, in the order of the queries."""
        for q in queries:
            self._known(q.get("topic"), q["metric"])
        out: list[tuple[str | None, list[Finding]]] = []
        rounds: list[str | None] = [*reversed(self.c.rounds)]
        for r in rounds or [None]:
            hits: list[Finding] = []
            for q in queries:
                hits += [f for f in self.findings(**{"round": r, **q}) if f not in hits]
            out.append((r, hits))
        return out

    def unshown(self) -> list[Finding]:
        """Findings of this campaign that no page rendered so far has shown."""
        return [f for f in self.c.findings if (self.c.name, f.key) not in self.site.finding_pages]

    def finding_anchor(self, finding: Finding) -> str:
        """The HTML id of a finding's row on this page; the first page that shows a finding is its home."""
        if self.campaign is not None:
            self.site.finding_pages.setdefault((self.campaign.name, finding.key), self.page_path)
        return anchor_of(finding.key)

    def finding_link(self, key: str) -> str:
        """A link, labelled in Chinese, to the page (and row) where a finding is shown; raises if none
        does."""
        home = self.site.finding_pages.get((self.c.name, key))
        if home is None:
            raise RenderError(f"{self.page_path}: finding {key!r} is shown on no page")
        f = self.c.findings[key]
        label = labels_zh.finding_label(f)
        if f.round:
            label = f"{labels_zh.round_label(f.round)} · {label}"
        return f"[{label}]({self.link(home)}#{anchor_of(key)})"

    def finding_ref(self, finding: Finding, text: str) -> str:
        """``text`` linked to the row where the finding is shown (a line of prose that rests on a finding).
        A page's conclusion comes before its own findings table, so the link is resolved when every page has
        been rendered (resolve_finding_refs); a finding no page shows stays plain text."""
        return f"{_REF}{self.c.name}{_SEP}{finding.key}{_SEP}{text}{_REF}"

    # -- tables ----------------------------------------------------------------------------------------------
    def t(self, name: str) -> Table:
        if name not in self.c.tables:
            have = ", ".join(sorted(self.c.tables))
            raise RenderError(f"{self.page_path}: no table {name!r} in the results (have: {have})")
        return self.c.tables[name]

    def _column_label(self, table: str, column: Any) -> str:
        if not isinstance(column, str):
            raise RenderError(
                f"{self.page_path}: table {table!r}: column {column!r}: a template names a column, its label "
                "lives in analysis/labels_zh.COLUMNS"
            )
        label = labels_zh.column_label(column, table)
        if label is None:
            raise RenderError(
                f"{self.page_path}: table {table!r}: column {column!r} has no label (labels_zh)"
            )
        return label

    def has_table(self, name: str) -> bool:
        return (
            self.campaign is not None and name in self.campaign.tables and len(self.campaign.tables[name]) > 0
        )

    def by_round(self, name: str | Table, **where: Any) -> list[tuple[str | None, Table]]:
        """The table's rows per round, newest first, rounds without rows left out (one untitled group without
        rounds)."""
        tab = name if isinstance(name, Table) else self.t(name)
        if where:
            tab = tab.where(**where)
        if not self.c.rounds:
            return [(None, tab)] if len(tab) else []
        return [(r, tab.where(round=r)) for r in reversed(self.c.rounds) if len(tab.where(round=r))]

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

    def table(
        self,
        name: str | Table,
        columns: list[str],
        where: dict[str, Any] | None = None,
        relabel: dict[str, dict[Any, str]] | None = None,
        optional: list[str] | None = None,
    ) -> str:
        """A markdown table of chosen columns, each headed by its label in analysis/labels_zh
        (``column_label``: one label per column name, a table's own where its column means something else).
        A template names columns only: a header written in a template, or a column without a label, fails the
        build.

        ``relabel`` maps a column's raw values to words (a set of labels_zh.VALUE_LABELS, e.g. gate
        statuses). Text columns are left-aligned, numeric ones right-aligned. Columns named in ``optional``
        are left out where the table lacks them or has no value in them (a measured ceiling that only some
        campaigns have).
        """
        tab = name if isinstance(name, Table) else self.t(name)
        if where:
            tab = tab.where(**where)
        cols = [(c, self._column_label(tab.name, c)) for c in columns]
        if optional:
            cols = [
                (c, h)
                for c, h in cols
                if c not in optional or (c in tab.columns and any(r.get(c) is not None for r in tab.rows))
            ]
        for col, _ in cols:
            if col not in tab.columns:
                raise RenderError(
                    f"{self.page_path}: table {tab.name!r} has no column {col!r} (has: "
                    f"{', '.join(tab.columns)})"
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
            if col == "series_key" and isinstance(value, str):
                return self.site.series_labels.get(value, value)
            return labels_zh.cell_text(col, value)

        body = [[cell(col, row[col]) for col, _ in cols] for row in tab.rows]
        numeric = [
            all(
                isinstance(r[col], int | float) and not isinstance(r[col], bool)
                for r in tab.rows
                if r[col] is not None
            )
            and col not in relabel
            for col, _ in cols
        ]
        return markdown_table([h for _, h in cols], body, ["--:" if n else "---" for n in numeric])

    # -- figures ---------------------------------------------------------------------------------------------
    def has_figure(self, name: str) -> bool:
        return self.campaign is not None and name in self.campaign.figures

    def figure(self, name: str, caption: str, title: str | None = None, alt: str | None = None) -> str:
        """The figure as a static SVG beside this page, with the caption (what to look at) below it."""
        if not self.has_figure(name):
            have = ", ".join(sorted(self.campaign.figures)) if self.campaign else "none"
            raise RenderError(f"{self.page_path}: no figure {name!r} in the results (have: {have})")
        if not caption.strip():
            raise RenderError(f"{self.page_path}: figure {name!r} needs a caption saying what to look at")
        spec_path = self.c.figures[name]
        # Layered specs may carry their title only in labels_zh.FIGURES (the analysis' source of titles).
        title = (
            title
            or spec_title(load_spec(spec_path))
            or labels_zh.FIGURES.get(name.rsplit("/", 1)[-1], {}).get("title")
        )
        svg = self.site.figures.place(self.c.name, name, spec_path, self.page_path, title)
        if svg not in self.site.report.figures:
            self.site.report.figures.append(svg)
        csv_rel, spec_rel = downloads_of(svg)
        csv_name, spec_name = csv_rel.rsplit("/", 1)[-1], spec_rel.rsplit("/", 1)[-1]
        return (
            f'<figure class="ia-figure" markdown="span">\n'
            f"  ![{md_escape(alt or title or name)}]({self.link(svg)}){{ loading=lazy }}\n"
            f"  <figcaption>{caption.strip()}</figcaption>\n"
            f"</figure>\n\n"
            f'[{labels_zh.DOWNLOAD_FIGURE_CSV}]({self.link(csv_rel)}){{ .ia-dl download="{csv_name}" }} · '
            f'[{labels_zh.DOWNLOAD_FIGURE_SPEC}]({self.link(spec_rel)}){{ .ia-dl download="{spec_name}" }}\n'
        )

    def unshown_figures(self) -> list[str]:
        """Figures of this campaign that no page rendered so far shows (nor deliberately left out)."""
        shown = self.site.figures.shown(self.c.name)
        left_out = set(self.site.figures.left_out.get(self.c.name, {}))
        return [n for n in sorted(self.c.figures) if n not in shown and n not in left_out]

    def leave_out_figure(self, name: str, reason: str) -> str:
        """Record that this page deliberately does not show a figure the analysis made (with why, for the
        render report and the tests); returns "" so a template can call it inline."""
        if self.has_figure(name):
            self.site.figures.left_out.setdefault(self.c.name, {})[name] = reason
            self.site.report.notes.append(f"{self.c.name}: figure {name!r} left out: {reason}")
        return ""

    # -- citations -------------------------------------------------------------------------------------------
    def _find(self, cited: str) -> RawFile | None:
        """The raw file a citation names. The comparison cites ``<campaign>/<path>``: look in that
        campaign."""
        if self.campaign is None:
            return None
        head, _, rest = cited.partition("/")
        if rest and head in self.site.campaign_names and head != self.campaign.name:
            return self.site.lookup(head).find(rest)
        return self.site.lookup(self.campaign.name).find(cited)

    def source_link(self, source: str) -> str:
        """A finding's citation as a link to its file's row in the raw-data index of the campaign."""
        hit = self._find(source_file(source))
        if hit is None:
            return f"`{source_path(source)}`"
        return (
            f"[`{source_path(source)}`]({self.link(f'data/{hit.campaign}.md')}#"
            f"{file_anchor(hit.run, hit.rel)})"
        )

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

    # -- links -----------------------------------------------------------------------------------------------
    def has_page(self, target: str) -> bool:
        """Whether the site has (or will have) the page ``target`` (relative to docs_dir)."""
        return target in self.site.planned_pages or target in self.site.report.pages

    def page_link(self, target: str, fallback: str) -> str:
        """A link to ``target`` if that page was rendered, else to ``fallback`` (a page without its data is
        not)."""
        return self.link(target if self.has_page(target) else fallback)

    def link(self, target: str) -> str:
        """A relative link from this page to another page or file (both relative to docs_dir)."""
        return relative_link(target, self.page_path)


# Marks of a deferred link to a finding's row: private-use characters, never in a template's text (and, unlike
# ASCII separators, not line breaks to str.splitlines, which jinja's indent filter uses).
_REF, _SEP = "\ue000", "\ue001"
_REF_RE = re.compile(f"{_REF}([^{_SEP}]*){_SEP}([^{_SEP}]*){_SEP}([^{_REF}]*){_REF}")


def resolve_finding_refs(site: SiteState, page: Page) -> str:
    """The page's text with every deferred finding link pointing at the finding's row (its first page)."""

    def link(m: re.Match[str]) -> str:
        campaign, key, text = m.groups()
        home = site.finding_pages.get((campaign, key))
        if home is None:
            return text
        return f"[{text}]({relative_link(home, page.path)}#{anchor_of(key)})"

    return _REF_RE.sub(link, page.text)


def render_template(
    site: SiteState, template: str, page_path: str, campaign: CampaignResults | None, **data: Any
) -> Page:
    """One page from one template; the names every template may use are passed here."""
    ctx = PageContext(site, page_path, campaign)
    names: dict[str, Any] = {
        "ctx": ctx,
        "campaign": campaign,
        "link": ctx.link,
        "t": ctx.t,
        "has_table": ctx.has_table,
        "table": ctx.table,
        "figure": ctx.figure,
        "has_figure": ctx.has_figure,
    }
    if campaign is not None:
        names.update(get=ctx.get, find=ctx.find, latest=ctx.latest)
    try:
        text = site.env.get_template(template).render(**names, **data)
    except jinja2.UndefinedError as err:
        raise RenderError(f"{template} → {page_path}: {err.message}") from err
    except RenderError as err:
        raise RenderError(f"{template}: {err}") from err
    return Page(page_path, text)
