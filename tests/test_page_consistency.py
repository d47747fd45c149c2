"""Every page of every campaign says each number once and the same way: a number that links to a finding is
that finding's value as formatted (or a count, a part or a scaling of it), and a key quantity that pages state
in prose (the byte ratio of the weight formats, the single-stream step ratio, the recommended concurrency, the
crossover budget) shows one value on every page, at any precision.

Runs on the site built once per test session (tests/browser.py: the reference campaign, raw/, a synthetic GPU
campaign)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from analysis.report.markdown import anchor_of

NUM = re.compile(r"[−+-]?\d[\d,]*(?:\.\d+)?")
# a link whose text is a number: [2.710 倍](engines.md#f-round2-single-stream-step-ratio)
VALUE_LINK = re.compile(r"\[([−+-]?\d[^\]]*)\]\([^)#]*#(f-[a-z0-9-]+)\)")
# the ways a page may scale a finding's value: as is, a fraction as %, bytes as GB/GiB, ms as s, … (the
# formatter's choice of unit for a size or a duration)
SCALES = (1.0, 100.0, 1e-3, 1e-6, 1e-9, 1e-12, 1e-15, 1 / 1024**2, 1 / 1024**3, 1e3)


@pytest.fixture(scope="module")
def built():
    import browser as br  # tests/browser.py: one build per test session, shared with the other site tests

    return br.built_site()


def _numbers(v: object) -> list[float]:
    """The numbers a finding's value holds (a list's length counts too: 「1 个」 of a one-point list)."""
    if isinstance(v, bool):
        return []
    if isinstance(v, int | float):
        return [float(v)]
    if isinstance(v, list):
        return [float(len(v)), *(x for y in v for x in _numbers(y))]
    if isinstance(v, dict):
        return [x for y in v.values() for x in _numbers(y)]
    return []


def _shown_equals(text: str, candidates: list[float]) -> bool:
    """The number as printed equals one candidate to the printed precision (fmt_num keeps 3-4 significant
    digits, so at least ±0.6 %)."""
    digits = text.split(".")[1] if "." in text else ""
    t = float(text.replace(",", "").replace("−", "-"))
    tol = max(0.5 * 10 ** -len(digits), abs(t) * 0.006)
    return any(abs(abs(c) - abs(t)) <= tol for c in candidates)


def _anchors(results: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for fj in results.glob("*/findings.json"):
        for key, f in json.loads(fj.read_text(encoding="utf-8")).items():
            out.setdefault(anchor_of(key), []).append(f)
    return out


def test_every_number_that_cites_a_finding_is_that_finding(built):
    anchors = _anchors(built.results)
    problems, n = [], 0
    for md in sorted(built.docs.rglob("*.md")):
        for label, anchor in VALUE_LINK.findall(md.read_text(encoding="utf-8")):
            if anchor not in anchors:
                continue
            n += 1
            cands = [
                x * s
                for f in anchors[anchor]
                for x in _numbers(f.get("value")) + _numbers(f.get("theory"))
                for s in SCALES
            ]
            for shown in NUM.findall(label):
                if not _shown_equals(shown, cands):
                    problems.append(
                        f"{md.relative_to(built.docs)}: [{label}] cites {anchor}, which is not {shown}"
                    )
    assert n > 100, n
    assert not problems, "\n".join(problems[:30])


def _decimals(text: str) -> int:
    """The decimals a shown number carries, at most those of three significant digits."""
    x = abs(float(text))
    written = len(text.split(".", 1)[1]) if "." in text else 0
    return min(written, max(0, 3 - (math.floor(math.log10(x)) + 1))) if x else written


# (quantity, the prose that states it: group 1 is the number)
KEY_QUANTITIES = [
    pytest.param(
        "byte ratio of the two weight formats (bytes read per step)",
        re.compile(
            r"(?:读取的字节之比(?:是|预测)?|字节之比预测|读取的字节预测|字节是领先者的)\s*([\d.]+)\s*倍"
        ),
        id="byte-ratio",
    ),
    pytest.param(
        "single-stream step ratio, measured",
        re.compile(r"单流(?:时|解码步)[^。；]{0,40}?的\s*\[?([\d.]+)\s*倍"),
        id="single-stream-ratio",
    ),
    pytest.param(
        "recommended concurrency",
        re.compile(r"推荐的工作点[^：]*：并发 \[?(\d+)"),
        id="recommended-concurrency",
    ),
    pytest.param(
        "crossover p99 TTFT budget (the engine boundary): headline prose and its finding's row",
        re.compile(
            r"(?:预算低于约|选型分界约)\s*\[?([\d.]+)\s*(秒)"
            r'|id="f-(?!round1-)[a-z0-9-]*selection-boundary-p99-ttft-ms"></span>[^|]*\|\s*([\d,.]+)\s*(毫秒|秒)'
        ),
        id="crossover-budget",
    ),
]
# a quantity shown in seconds here and milliseconds there is one number: compared in seconds
TO_SECONDS = {"秒": 1.0, "毫秒": 1e-3}


def _shown(match: tuple[str, ...] | str) -> str:
    """The number a KEY_QUANTITIES pattern captured, in the quantity's one unit (patterns with a unit group
    capture (number, unit) pairs, the first pair that matched)."""
    if isinstance(match, str):
        return match.replace(",", "")
    number, unit = next((n, u) for n, u in zip(match[::2], match[1::2], strict=True) if n)
    return f"{float(number.replace(',', '')) * TO_SECONDS[unit]:g}"


@pytest.mark.parametrize(("what", "prose"), KEY_QUANTITIES)
def test_one_quantity_one_number_on_every_page(built, what, prose):
    """Per campaign (the home page counts for the campaign it answers for, the reference)."""
    for campaign in built.campaigns:
        pages = [*(built.docs / "campaigns" / campaign).glob("*.md")]
        if campaign == "rtx4090-qwen2.5-7b":
            pages.append(built.docs / "index.md")
        seen: dict[str, set[str]] = {}
        for md in pages:
            for shown in prose.findall(md.read_text(encoding="utf-8")):
                seen.setdefault(_shown(shown), set()).add(md.name)
        # a headline at reader precision (3.2) and the evidence's digits (3.202) are one number: each value is
        # the most precise one rounded to its own digits, up to three significant ones (3.24 beside 3.202 is
        # not: at two decimals they read 3.24 and 3.20)
        if seen:
            finest = max(seen, key=_decimals)
            agree = all(round(float(finest), _decimals(v)) == round(float(v), _decimals(v)) for v in seen)
            assert agree, f"{campaign}: {what} shown as {seen}"
