"""The prefix-cache hit rate on the campaign overview (analysis.reconcile.prefix_cache,
campaign/overview.md.j2): answer first, one evidence row per point, n/a with its reason where the campaign has
no point of its own — rendered by the real pipeline from the repository's CPU campaign and the imported
reference campaign."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.labels_zh import REASONS, fmt_value
from analysis.pipeline import analyze
from analysis.report.render import render_site

ROOT = Path(__file__).resolve().parent.parent
CPU = "cpu-tiny-qwen2"


def _section(docs: Path, campaign: str) -> str:
    page = (docs / "campaigns" / campaign / "index.md").read_text(encoding="utf-8")
    m = re.search(r"## 前缀缓存命中率 \{ #prefix-cache \}\n(.*?)\n## ", page, re.S)
    assert m, "no prefix-cache section on the overview"
    return m.group(1)


def _hit_rates(results: Path, campaign: str) -> list[dict]:
    found = json.loads((results / campaign / "findings.json").read_text())
    found = found.get("findings", found)
    return [f for f in found.values() if f.get("topic") == "prefix_cache"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, reference_raw) -> tuple[Path, Path]:
    if not (ROOT / "raw" / CPU).is_dir():
        pytest.skip(f"raw/{CPU} not in this checkout")
    tmp = tmp_path_factory.mktemp("pc")
    own = tmp / "raw"
    own.mkdir()
    (own / CPU).symlink_to(ROOT / "raw" / CPU)  # the committed campaign, read in place (never written)
    roots = [own, *([reference_raw] if reference_raw is not None else [])]
    results, docs = tmp / "results", tmp / "docs"
    list(analyze(roots, results, None))
    render_site(results, docs)
    return results, docs


def test_own_campaign_states_its_hit_rates_first(site) -> None:
    results, docs = site
    rates = _hit_rates(results, CPU)
    measured = [f for f in rates if f["status"] != "n/a"]
    assert measured, "the CPU campaign's runs have /metrics scrapes at every point's boundaries"
    for f in measured:  # the rate is the cache's hit tokens over the tokens looked up, as the finding says
        assert f["value"] == pytest.approx(f["hit_tokens"] / f["queried_tokens"])
    text = _section(docs, CPU)
    warm = [f for f in measured if f["value"] > 0]
    assert text.lstrip().startswith('!!! abstract "结论"')
    assert f"{len(measured)} 个测量点读到了命中率，{len(warm)} 个高于 0" in text
    # one evidence row per point, each measured value shown as a percentage
    assert len(re.findall(r'<span id="f-[^"]*prefix-cache-hit-rate"', text)) == len(rates)
    for f in measured:
        assert fmt_value(f["value"], "fraction") in text and fmt_value(0.5, "fraction") == "50.0%"


def test_imported_campaign_says_why_it_has_none(site, reference_raw) -> None:
    if reference_raw is None:
        pytest.skip("reference campaign not present")
    results, docs = site
    (finding,) = _hit_rates(results, "rtx4090-qwen2.5-7b")
    assert finding["status"] == "n/a" and finding["reason"] == "prefix_cache_imported"
    text = _section(docs, "rtx4090-qwen2.5-7b")
    assert f"前缀缓存命中率：无数据（{REASONS['prefix_cache_imported']}）" in text.split("\n\n")[0]
