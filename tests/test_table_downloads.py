"""Issue #23: a CSV beside every table of the built site, holding what the table shows (analysis/report/
table_downloads), copied into the site so it works offline and on GitHub Pages."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from analysis.report.table_downloads import attach, find_tables

PAGE = """# A page

| 量（来源） | 实测 |
|---|--:|
| <span id="f-x"></span>[吞吐](../x.md#f-x)<br><span class="ia-srcs">a.json</span> | 1,234 token/s |
| `c` \\| d | **通过** |

??? note "第一轮（较早的轮次）"

    | 并发 | p99 |
    |--:|--:|
    | 1 | 15.8 |

```
| a fenced | example |
|---|---|
```
"""


def test_each_table_gets_the_csv_of_what_it_shows():
    text, files = attach("campaigns/c/lengths.md", PAGE, "下载本表（CSV）")
    assert sorted(files) == ["campaigns/c/csv/lengths-1.csv", "campaigns/c/csv/lengths-2.csv"]
    rows = list(csv.reader(files["campaigns/c/csv/lengths-1.csv"].splitlines()))
    assert rows == [["量（来源）", "实测"], ["吞吐 a.json", "1,234 token/s"], ["c | d", "通过"]]
    assert list(csv.reader(files["campaigns/c/csv/lengths-2.csv"].splitlines())) == [
        ["并发", "p99"],
        ["1", "15.8"],
    ]
    # the link under the folded table keeps its indent (inside the admonition); the fenced example is no table
    assert '    [下载本表（CSV）](csv/lengths-2.csv){ .ia-dl download="lengths-2.csv" }' in text.splitlines()
    assert len(find_tables(text.splitlines())) == 2


@pytest.fixture(scope="module")
def built():
    import browser as br  # tests/browser.py: one build per test session, shared with the other site tests

    return br.built_site()


def test_every_table_of_the_built_site_links_its_csv(built):
    """Every pipe table of every rendered page has its link, the file is in the built site where the link
    points, and it has the table's rows."""
    checked = 0
    for md in built.docs.rglob("*.md"):
        rel = md.relative_to(built.docs).as_posix()
        lines = md.read_text(encoding="utf-8").splitlines()
        for n, (a, b) in enumerate(find_tables(lines), 1):
            link = next((ln for ln in lines[b : b + 3] if "ia-dl" in ln), "")
            target = re.search(r"\]\(([^)]+\.csv)\)", link)
            assert target, f"{rel}: table {n} (line {a + 1}) has no CSV link under it"
            # MkDocs serves page.md at page/: the link, relative to the .md, lands beside it in the site
            csv_file = built.site / Path(rel).parent / target.group(1)
            assert csv_file.is_file(), f"{rel}: {target.group(1)} not in the built site"
            assert len(list(csv.reader(csv_file.open(encoding="utf-8")))) == b - a - 1, (rel, n)
            checked += 1
    assert checked > 100


def test_every_figure_of_the_built_site_links_its_data_and_spec(built):
    """Every figure of every rendered page has, under it, a CSV of the points it draws and its Vega-Lite spec;
    both are in the built site where the links point, and the CSV has every row of the spec's datasets."""
    import json

    checked = 0
    for md in built.docs.rglob("*.md"):
        rel = md.relative_to(built.docs).as_posix()
        text = md.read_text(encoding="utf-8")
        for svg in re.findall(r"\]\(([^)]+\.svg)\)\{ loading=lazy \}", text):
            stem = svg[: -len(".svg")]
            tail = text[text.index(svg) :]
            assert f"]({stem}.csv)" in tail.split("</figure>", 1)[1][:400], f"{rel}: {svg} has no data link"
            folder = built.site / Path(rel).parent
            spec = json.loads((folder / f"{stem}.vl.json").read_text(encoding="utf-8"))
            rows = list(csv.DictReader((folder / f"{stem}.csv").open(encoding="utf-8")))
            # counted from the spec itself, not through figure_rows: every inline dataset's rows
            drawn = sum(len(v) for v in (spec.get("datasets") or {}).values())
            drawn += len((spec.get("data") or {}).get("values") or [])
            assert len(rows) == drawn > 0, (rel, svg)
            checked += 1
    assert checked > 20


def test_figure_rows_keep_each_dataset_apart():
    from analysis.report.figures import figure_csv

    spec = {"datasets": {"a": [{"x": 1, "y": 2}], "b": [{"x": 3, "z": 4}]}, "data": {"name": "a"}}
    assert list(csv.reader(figure_csv(spec).splitlines())) == [
        ["dataset", "x", "y", "z"],
        ["1", "1", "2", ""],
        ["2", "3", "", "4"],
    ]
