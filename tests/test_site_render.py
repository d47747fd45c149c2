"""The renderer on small hand-made results: formatting, strictness, figures, the raw-data index."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from analysis.report import format as fmt
from analysis.report.figures import check_publishable, prepare_spec, spec_to_svg
from analysis.report.rawindex import index_runs, link_findings
from analysis.report.render import SiteRenderer, format_cell, render_site
from analysis.report.results import RenderError, load_findings
from collector.store import RawStore

# -- formatting, checked against numbers worked out by hand ---------------------------------------------


def test_thousands_separators_and_precision():
    assert fmt.fmt_num(12345.6) == "12,346"
    assert fmt.fmt_num(1404.71, 2) == "1,404.71"
    assert fmt.fmt_num(0.012345) == "0.0123"
    assert fmt.fmt_num(120064) == "120,064"
    assert fmt.fmt_num(-0.0001, 2) == "0.00"  # no "-0.00"
    assert fmt.fmt_num(None) == "—"
    assert fmt.fmt_num(float("nan")) == "—"


def test_percent_and_signed_percent():
    assert fmt.fmt_pct(12.345) == "12.3%"
    assert fmt.fmt_pct(0.4567) == "0.46%"
    assert fmt.fmt_signed_pct(-0.4) == "−0.40%"
    assert fmt.fmt_signed_pct(3.21) == "+3.2%"
    assert fmt.fmt_fraction_pct(0.9123) == "91.2%"


def test_bytes_binary_units():
    # 14.19 GiB: 15,231,233,024 / 2**30 = 14.1852... → four significant digits
    assert fmt.fmt_bytes(15_231_233_024) == "14.19 GiB"
    assert fmt.fmt_bytes(57_344) == "56.00 KiB"  # 57344 / 1024 = 56 exactly
    assert fmt.fmt_bytes(512) == "512 B"


def test_table_cells_formatted_by_column_unit():
    assert format_cell("ttft_ms", 1234.5678) == "1,235"
    assert format_cell("mfu_pct", 41.23) == "41.2%"
    assert format_cell("slope_error_pct", -1.5) == "−1.5%"
    assert format_cell("peak_kv_usage_fraction", 0.5) == "50.0%"
    assert format_cell("weight_bytes", 2**30 * 4.5) == "4.500 GiB"
    assert format_cell("weight_bytes_per_step", 2**30 * 4.5) == "4.500 GiB"
    assert format_cell("bandwidth_bytes_per_s", 1.008e12) == "1,008 GB/s"
    assert format_cell("kv_bytes_per_token", 57344) == "57,344"
    assert format_cell("concurrency", 64) == "64"
    assert format_cell("engine", "vllm") == "vLLM（bf16）"  # engines and rounds by their Chinese names
    assert format_cell("round", "round2") == "第二轮"
    assert format_cell("test", "03-perf-test") == "03-perf-test"


# -- strict rendering ----------------------------------------------------------------------------------------

FINDINGS = {
    "round2.kv_pool_tokens_log": {
        "value": 120064, "unit": "tokens", "sources": ["Round2/01-02-perf-test/vllm-server.head.log:58"],
        "theory": 120000.0, "error_pct": 0.0533, "tolerance_pct": 1.0, "status": "ok",
    },
    "round2.kv_fit_slope": {
        "value": 0.8, "unit": "", "sources": [], "theory": 1.0, "error_pct": -20.0, "tolerance_pct": 5.0,
        "status": "mismatch",
    },
    "round1.max_mfu_pct": {
        "value": None, "unit": "%", "sources": [], "status": "n/a", "reason": "no_sampler_csv",
        "detail": "Round1/02-perf-test kept no sampler CSV",
    },
}

SPEC = {
    "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
    "title": "吞吐随并发数的变化",
    "data": {"values": [{"c": 1, "t": 60.5}, {"c": 64, "t": 2400.0}]},
    "mark": "line",
    "encoding": {
        "x": {"field": "c", "type": "quantitative", "title": "并发数"},
        "y": {"field": "t", "type": "quantitative", "title": "输出吞吐（token/s）"},
    },
}


def _results(tmp: Path, findings=FINDINGS, spec=SPEC) -> Path:
    c = tmp / "results" / "demo"
    c.mkdir(parents=True)
    (c / "findings.json").write_text(json.dumps(findings, ensure_ascii=False))
    (c / "points.csv").write_text("concurrency,ttft_ms\n1,12.5\n64,1234.5678\n")
    (c / "throughput.vl.json").write_text(json.dumps(spec, ensure_ascii=False))
    return tmp / "results"


def _templates(tmp: Path, page: str) -> Path:
    t = tmp / "templates"
    (t / "campaign").mkdir(parents=True)
    (t / "_site.j2").write_text(
        '{% set nav_structure = "S" %}{% set nav_method = "M" %}{% set nav_data = "D" %}'
        "{% set handwritten_pages = [] %}"
    )
    for name in ("home.md.j2", "structure.md.j2", "raw_index.md.j2"):
        (t / name).write_text("# page\n")
    (t / "campaign" / "page.md.j2").write_text(page)
    return t


def _render(tmp: Path, page: str, findings=FINDINGS, spec=SPEC):
    import analysis.report.render as r

    results = _results(tmp, findings, spec)
    old = r.CAMPAIGN_PAGES
    r.CAMPAIGN_PAGES = (("index", "campaign/page.md.j2"),)
    try:
        renderer = SiteRenderer(results, [], tmp / "docs", templates_dir=_templates(tmp, page), handwritten_dir=None,
                                assets_dir=None)
        renderer.render()
    finally:
        r.CAMPAIGN_PAGES = old
    return (tmp / "docs" / "campaigns" / "demo" / "index.md").read_text(encoding="utf-8")


def test_a_typo_in_a_template_variable_fails_the_build(tmp_path):
    with pytest.raises(RenderError, match="kv_pool_tokenz"):
        _render(tmp_path, "# t\n{{ kv_pool_tokenz }}\n")


def test_a_missing_finding_key_fails_the_build_naming_the_key(tmp_path):
    with pytest.raises(RenderError, match=r"no key 'round2\.knee_concurrency'"):
        _render(tmp_path, '# t\n{{ f("round2.knee_concurrency").text }}\n')


def test_a_missing_attribute_of_a_finding_fails(tmp_path):
    with pytest.raises(RenderError):
        _render(tmp_path, '# t\n{{ f("round2.kv_pool_tokens_log").valu }}\n')


def test_missing_table_column_and_figure_fail(tmp_path):
    with pytest.raises(RenderError, match="no column 'tpot_ms'"):
        _render(tmp_path / "a", '# t\n{{ table("points", [("tpot_ms", "x")]) }}\n')
    with pytest.raises(RenderError, match="no figure 'latency'"):
        _render(tmp_path / "b", '# t\n{{ figure("latency", caption="c") }}\n')


def test_finding_values_theory_error_and_failed_status_are_shown(tmp_path):
    page = (
        "# t\n"
        '{% import "_macros.j2" as m %}'
        '{{ m.findings_table(ctx, ["round2.kv_pool_tokens_log", "round2.kv_fit_slope", "round1.max_mfu_pct"]) }}\n'
    )
    t = tmp_path / "x"
    t.mkdir()
    real = Path(__file__).resolve().parents[1] / "site" / "templates"
    import analysis.report.render as r

    results = _results(t)
    templates = _templates(t, page)
    for name in ("_macros.j2", "_labels.j2"):
        (templates / name).write_text((real / name).read_text(encoding="utf-8"), encoding="utf-8")
    old = r.CAMPAIGN_PAGES
    r.CAMPAIGN_PAGES = (("index", "campaign/page.md.j2"),)
    try:
        SiteRenderer(results, [], t / "docs", templates_dir=templates, handwritten_dir=None, assets_dir=None).render()
    finally:
        r.CAMPAIGN_PAGES = old
    text = (t / "docs" / "campaigns" / "demo" / "index.md").read_text(encoding="utf-8")
    assert "120,064 token" in text and "+0.053%" in text  # value with 千分位, signed error
    assert '<span class="ia-badge ia-fail">不吻合</span>' in text  # the failed reconciliation shows as failed
    assert "−20.0%" in text
    assert '<span class="ia-badge ia-na">无数据</span>' in text and "采样 CSV" in text  # n/a with its reason


def test_table_and_figure_render(tmp_path):
    text = _render(
        tmp_path,
        '# t\n{{ table("points", [("concurrency", "并发"), ("ttft_ms", "TTFT（毫秒）")]) }}\n'
        '{{ figure("throughput", caption="看拐点。") }}\n',
    )
    assert "| 64 | 1,235 |" in text
    assert "![吞吐随并发数的变化](figures/throughput.svg)" in text and "看拐点。" in text
    svg = (tmp_path / "docs" / "campaigns" / "demo" / "figures" / "throughput.svg").read_text()
    assert "<path" in svg and "吞吐随并发数的变化" in svg
    nav = json.loads((tmp_path / "docs" / ".nav.json").read_text())
    assert {"t": "campaigns/demo/index.md"} in nav[2]["t"]


def test_renderer_never_empties_a_folder_it_did_not_make(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "precious.md").write_text("keep")
    with pytest.raises(RenderError, match="not touching it"):
        render_site(_results(tmp_path), [], tmp_path / "docs")
    assert (tmp_path / "docs" / "precious.md").read_text() == "keep"


# -- figures ---------------------------------------------------------------------------------------------------


def test_figure_without_chinese_title_or_axis_title_is_refused():
    bad = {**SPEC, "title": "Throughput"}
    assert any("Chinese title" in p for p in check_publishable(bad, "f"))
    no_axis = json.loads(json.dumps(SPEC))
    del no_axis["encoding"]["y"]["title"]
    assert any("y axis has no title" in p for p in check_publishable(no_axis, "f"))
    assert check_publishable(SPEC, "f") == []


def test_svg_uses_thousands_separators_and_keeps_chinese_text():
    svg = spec_to_svg(prepare_spec(SPEC))
    assert "2,400" in svg  # zh-CN locale on the y axis ticks
    assert "并发数" in svg and "输出吞吐（token/s）" in svg


# -- raw-data index ---------------------------------------------------------------------------------------------


def test_raw_index_sizes_hashes_provenance_and_users(tmp_path):
    src = tmp_path / "src" / "Round2" / "04-perf-test"
    src.mkdir(parents=True)
    payload = b'{"completed": 128}\n'
    (src / "stress.json").write_bytes(payload)
    from collector.importer import import_results

    list(import_results(tmp_path / "src", campaign="demo", raw_root=tmp_path / "raw"))
    runs = index_runs([tmp_path / "raw"])
    (f,) = [f for r in runs for f in r.files]
    assert f.size == len(payload) and f.sha256 == hashlib.sha256(payload).hexdigest()
    assert f.source == "Round2/04-perf-test/stress.json"
    assert runs[0].origin == "src/Round2/04-perf-test" and runs[0].status == "complete"
    findings_path = tmp_path / "f.json"
    findings_path.write_text(json.dumps({
        "round2.overload.completed": {"value": 128, "unit": "requests",
                                      "sources": ["Round2/04-perf-test/stress.json:completed"]},
        "round2.elsewhere": {"value": 1, "unit": "", "sources": ["Round9/x/y.json:z"]},
    }))
    unmatched = link_findings(runs, load_findings(findings_path))
    assert f.used_by == ["round2.overload.completed"]
    assert unmatched == ["Round9/x/y.json"]


def test_unsealed_run_is_listed_as_such(tmp_path):
    run = RawStore(tmp_path / "raw").create_run("demo", "r1", kind="collected")
    run.write_text("requests.jsonl", "{}\n")
    run.close_unsealed()
    (r,) = index_runs([tmp_path / "raw"])
    assert r.status == "unsealed" and [f.rel for f in r.files] == ["requests.jsonl"]


# -- the real templates on the real reference campaign ----------------------------------------------------------


@pytest.fixture(scope="module")
def reference_site():
    import browser as br  # tests/browser.py: one build per test session, shared with the browser test

    if br.reference_source() is None:
        pytest.skip("reference campaign ../shared/seed-runs/rtx4090-qwen2.5-7b not present")
    return br.built_site()


def test_reference_site_shows_every_finding_and_every_figure(reference_site):
    import re

    findings = json.loads((reference_site.results / "rtx4090-qwen2.5-7b" / "findings.json").read_text())
    pages = "\n".join(p.read_text(encoding="utf-8") for p in reference_site.docs.rglob("*.md"))
    missing = [k for k in findings if f'id="f-{re.sub(r"[^a-z0-9]+", "-", k.lower()).strip("-")}"' not in pages]
    assert not missing, f"findings on no page: {missing}"
    specs = {p.name.removesuffix(".vl.json") for p in (reference_site.results / "rtx4090-qwen2.5-7b").rglob("*.vl.json")}
    svgs = {p.stem for p in reference_site.docs.rglob("figures/*.svg")}
    assert specs == svgs


def test_reference_site_marks_failed_findings_and_gates(reference_site):
    findings = json.loads((reference_site.results / "rtx4090-qwen2.5-7b" / "findings.json").read_text())
    failed = [k for k, v in findings.items() if v["status"] == "mismatch"]
    docs = reference_site.docs
    for k in failed:
        anchor = "f-" + k.lower().replace(".", "-").replace("_", "-")
        hits = [p for p in docs.rglob("*.md") if f'id="{anchor}"' in p.read_text(encoding="utf-8")]
        assert hits, k
        row = next(line for line in hits[0].read_text(encoding="utf-8").splitlines() if f'id="{anchor}"' in line)
        assert "ia-fail" in row, f"{k}: a failed reconciliation is not shown as failed"


def test_reference_site_numbers_are_the_findings_formatted(reference_site):
    """Spot-check against the raw log by hand: round 2's vLLM log says `GPU KV cache size: 120,064 tokens`."""
    kv = (reference_site.docs / "campaigns" / "rtx4090-qwen2.5-7b" / "kv.md").read_text(encoding="utf-8")
    assert "日志报告的 KV 池为 120,064 token" in kv
    home = (reference_site.docs / "index.md").read_text(encoding="utf-8")
    assert "120,064 token" in home
    raw_index = (reference_site.docs / "data" / "rtx4090-qwen2.5-7b.md").read_text(encoding="utf-8")
    import hashlib

    import browser as br

    stress = br.reference_source() / "Round2" / "04-perf-test" / "stress.json"
    assert hashlib.sha256(stress.read_bytes()).hexdigest() in raw_index  # hashed here, independently
