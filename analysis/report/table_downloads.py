"""A CSV download beside every table of a rendered page (issue #23): each Markdown pipe table gets the rows it
shows written as a CSV file next to the page (``<page dir>/csv/<page stem>-<n>.csv``) and a link under it.

Done once, on the page's finished Markdown, so every table — findings tables, tables the templates write row
by row, result tables — gets one, and the file holds exactly what the table shows (the cells' text without
links, HTML or emphasis). The files are part of the docs folder, so MkDocs copies them into the site: they
work offline and on GitHub Pages.
"""

from __future__ import annotations

import csv
import html
import io
import posixpath
import re

from analysis.report.markdown import relative_link

_ROW = re.compile(r"^(?P<indent>[ \t]*)\|.*\|[ \t]*$")
_SEP = re.compile(r"^[ \t]*\|(?:[ \t]*:?-+:?[ \t]*\|)+[ \t]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)(\{[^}]*\})?")
_TAG = re.compile(r"<br\s*/?>|<[^>]+>")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


def cell_text(cell: str) -> str:
    """What a reader sees in a Markdown cell: links reduced to their text, line breaks to spaces, tags,
    emphasis and code marks removed, escapes and entities resolved."""
    text = _LINK.sub(r"\1", cell)
    text = _TAG.sub(lambda m: " " if m.group(0).startswith("<br") else "", text)
    text = text.replace("**", "").replace("`", "").replace("\\|", "|")
    return " ".join(html.unescape(text).split())


def split_row(line: str) -> list[str]:
    """The cells of one pipe-table row (the outer pipes dropped; an escaped ``\\|`` stays in its cell)."""
    inner = line.strip()[1:-1]
    return [cell_text(c) for c in _CELL_SPLIT.split(inner)]


def find_tables(lines: list[str]) -> list[tuple[int, int]]:
    """(first line, line after the last) of every pipe table: a row, then a separator row, then rows of the
    same indent; lines inside fenced code are not tables."""
    out: list[tuple[int, int]] = []
    fenced = False
    i = 0
    while i < len(lines):
        if _FENCE.match(lines[i]):
            fenced = not fenced
        elif not fenced and _ROW.match(lines[i]) and i + 1 < len(lines) and _SEP.match(lines[i + 1]):
            indent = _ROW.match(lines[i]).group("indent")  # type: ignore[union-attr]
            j = i + 2
            while j < len(lines) and (m := _ROW.match(lines[j])) and m.group("indent") == indent:
                j += 1
            out.append((i, j))
            i = j
            continue
        i += 1
    return out


def table_csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def csv_path(page_path: str, n: int) -> str:
    """Where the page's n-th table (1-based) is written, relative to the docs folder."""
    folder, name = posixpath.split(page_path)
    return posixpath.join(folder, "csv", f"{posixpath.splitext(name)[0]}-{n}.csv")


def attach(page_path: str, text: str, link_text: str) -> tuple[str, dict[str, str]]:
    """The page with a download link under each table, and the CSV files to write ({path: text}, paths
    relative to the docs folder)."""
    lines = text.split("\n")
    files: dict[str, str] = {}
    out: list[str] = []
    last = 0
    for n, (a, b) in enumerate(find_tables(lines), 1):
        rows = [split_row(ln) for k, ln in enumerate(lines[a:b]) if k != 1]
        path = csv_path(page_path, n)
        files[path] = table_csv(rows)
        indent = _ROW.match(lines[a]).group("indent")  # type: ignore[union-attr]
        name = posixpath.basename(path)
        link = f'{indent}[{link_text}]({relative_link(path, page_path)}){{ .ia-dl download="{name}" }}'
        out += lines[last:b] + ["", link, ""]
        last = b
    out += lines[last:]
    return "\n".join(out), files
