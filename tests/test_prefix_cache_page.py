"""The prefix-cache hit rate on the campaign overview (analysis.reconcile.capacity.prefix_cache,
campaign/overview.md.j2): answer first, one evidence row per point, n/a with its reason where the campaign has
no point of its own — rendered by the real pipeline from the repository's CPU campaign and the imported
reference campaign."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.core.labels_zh import REASONS, fmt_value
from analysis.pipeline.analyze import analyze
from analysis.report.render import render_site
from tests.by_hand import request_lines

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


_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})? (\S+)$", re.M)  # name{labels} value


def _counters(scrape: dict) -> dict[str, float]:
    """One /metrics text's samples, each name summed over its label sets."""
    sums: dict[str, float] = {}
    for name, value in _SAMPLE.findall(scrape["text"]):
        sums[name] = sums.get(name, 0.0) + float(value)
    return sums


def _counts_by_hand(run: str, point: str) -> tuple[str, float, float]:
    """(engine, hit tokens, queried tokens) from raw/<campaign>/<run>/scrapes.jsonl: the point's last good
    scrapes tagged point_start and point_end; vLLM: Δ prefix_cache_hits_total, Δ prefix_cache_queries_total;
    llama.cpp: Δ prompt_tokens_cached_total, that + Δ prompt_tokens_total."""
    lines = (ROOT / "raw" / CPU / run / "scrapes.jsonl").read_text().splitlines()
    scrapes = [json.loads(x) for x in lines if x.strip()]

    def at(tag: str) -> dict[str, float]:
        good = [o for o in scrapes if o["tag"] == tag and o.get("point") == point and o["status"] == 200]
        return _counters([o for o in good if o["error"] is None][-1])

    a, b = at("point_start"), at("point_end")
    if "vllm:prefix_cache_hits_total" in b:
        hits = b["vllm:prefix_cache_hits_total"] - a["vllm:prefix_cache_hits_total"]
        return "vllm", hits, b["vllm:prefix_cache_queries_total"] - a["vllm:prefix_cache_queries_total"]
    cached = b["llamacpp:prompt_tokens_cached_total"] - a["llamacpp:prompt_tokens_cached_total"]
    evaluated = b["llamacpp:prompt_tokens_total"] - a["llamacpp:prompt_tokens_total"]
    return "llamacpp", cached, cached + evaluated


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
    for f in measured:  # the rate from the run's raw scrapes, read here without the project's parsers
        engine, hits, queried = _counts_by_hand(f["run"], f["point"])
        assert f["value"] == pytest.approx(hits / queried, rel=1e-12) and f["queried_tokens"] == queried, f
        if engine == "llamacpp":  # cached or evaluated, every prompt token the point sent was looked up once
            sent = request_lines(ROOT / "raw" / CPU / f["run"])
            assert queried == sum(o["input_len"] for o in sent if o["point"] == f["point"]), f
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
