"""The renderer on small hand-made results: formatting, strictness, figures, the raw-data index."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from analysis.core.findings import FindingSet, write_table
from analysis.reconcile import provenance
from analysis.report.figures import check_publishable, prepare_spec, spec_to_svg
from analysis.report.profile import build_profile
from analysis.report.rawindex import link_findings, runs_of
from analysis.report.render import SiteRenderer, render_site
from analysis.report.results import CampaignResults, RenderError, Table, load_campaign
from collector.protocol.importer import import_results
from collector.raw.store import RawStore

# Number formatting and labels are tested with their one module (tests/test_analysis_findings.py).


# -- strict rendering ----------------------------------------------------------------------------------------

FINDINGS = {
    "round2.kv_pool_tokens_log": {
        "round": "round2",
        "metric": "kv_pool_tokens_log",
        "value": 120064,
        "unit": "tokens",
        "sources": ["Round2/01-02-perf-test/vllm-server.head.log:58"],
        "theory": 120000.0,
        "error_pct": 0.0533,
        "tolerance_pct": 1.0,
        "status": "ok",
    },
    "round2.kv_fit_slope": {
        "round": "round2",
        "metric": "kv_fit_slope",
        "value": 0.8,
        "unit": "",
        "sources": [],
        "theory": 1.0,
        "error_pct": -20.0,
        "tolerance_pct": 5.0,
        "status": "mismatch",
    },
    "round1.vllm.max_mfu_pct": {
        "round": "round1",
        "level": "engine",
        "engine": "vllm",
        "metric": "max_mfu_pct",
        "value": None,
        "unit": "%",
        "sources": [],
        "status": "n/a",
        "reason": "no_sampler_csv",
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


PROFILE = {"collected": False, "cpu": False, "gpu": None, "gpu_display": None, "descriptions": []}


def _results(tmp: Path, findings=FINDINGS, spec=SPEC) -> Path:
    c = tmp / "results" / "demo"
    c.mkdir(parents=True)
    (c / "findings.json").write_text(json.dumps(findings, ensure_ascii=False))
    (c / "index.json").write_text(json.dumps({"campaign": "demo", "profile": PROFILE}))
    (c / "points.csv").write_text("concurrency,ttft_ms\n1,12.5\n64,1234.5678\n")
    (c / "throughput.vl.json").write_text(json.dumps(spec, ensure_ascii=False))
    return tmp / "results"


def _templates(tmp: Path, page: str, real_names: tuple[str, ...] = ()) -> Path:
    t = tmp / "templates"
    (t / "campaign").mkdir(parents=True)
    real = Path(__file__).resolve().parents[1] / "site" / "templates"
    for name in ("_campaigns.j2", *real_names):
        (t / name).write_text((real / name).read_text(encoding="utf-8"), encoding="utf-8")
    for name in ("home.md.j2", "structure.md.j2", "raw_index.md.j2"):
        (t / name).write_text("# page\n")
    (t / "campaign" / "page.md.j2").write_text(page)
    return t


@pytest.fixture
def one_page(monkeypatch):
    """A site of one campaign page (the template under test) and no hand-written pages."""
    import analysis.report.campaign_pages as cp
    import analysis.report.render as r

    monkeypatch.setattr(cp, "CAMPAIGN_PAGES", (("index", "campaign/page.md.j2", lambda c: True),))
    monkeypatch.setattr(r, "HANDWRITTEN_PAGES", ())

    def render(tmp: Path, page: str, real_names: tuple[str, ...] = ()) -> str:
        templates = _templates(tmp, page, real_names)
        SiteRenderer(
            _results(tmp), tmp / "docs", templates_dir=templates, handwritten_dir=None, assets_dir=None
        ).render()
        return (tmp / "docs" / "campaigns" / "demo" / "index.md").read_text(encoding="utf-8")

    return render


def test_a_typo_in_a_template_variable_fails_the_build(tmp_path, one_page):
    with pytest.raises(RenderError, match="kv_pool_tokenz"):
        one_page(tmp_path, "# t\n{{ kv_pool_tokenz }}\n")


def test_a_missing_finding_fails_the_build_naming_its_fields(tmp_path, one_page):
    with pytest.raises(RenderError, match=r"no finding .*'metric': 'knee_concurrency'.*'round': 'round2'"):
        one_page(tmp_path / "a", '# t\n{{ get("knee_concurrency", round="round2") | value }}\n')
    with pytest.raises(RenderError, match=r"no campaign has a finding 'kv_pool_tokenz'"):  # a typo
        one_page(tmp_path / "b", '# t\n{{ find("kv_pool_tokenz") }}\n')


def test_a_missing_attribute_of_a_finding_fails(tmp_path, one_page):
    with pytest.raises(RenderError):
        one_page(tmp_path, '# t\n{{ get("kv_pool_tokens_log", round="round2").valu }}\n')


def test_missing_table_column_and_figure_fail(tmp_path, one_page):
    with pytest.raises(RenderError, match="no column 'tpot_ms'"):
        one_page(tmp_path / "a", '# t\n{{ table("points", ["tpot_ms"]) }}\n')
    with pytest.raises(RenderError, match="no figure 'latency'"):
        one_page(tmp_path / "b", '# t\n{{ figure("latency", caption="c") }}\n')


def test_column_labels_come_from_labels_zh_only(tmp_path, one_page, monkeypatch):
    """A header written in a template, or a column no label names, fails the build (one label per column)."""
    from analysis.core import labels_zh

    with pytest.raises(RenderError, match="its label lives in analysis/labels_zh"):
        one_page(tmp_path / "a", '# t\n{{ table("points", [("concurrency", "并发")]) }}\n')
    monkeypatch.delitem(labels_zh.COLUMNS, "ttft_ms")
    with pytest.raises(RenderError, match="'ttft_ms' has no label"):
        one_page(tmp_path / "b", '# t\n{{ table("points", ["ttft_ms"]) }}\n')


def test_finding_values_theory_error_and_failed_status_are_shown(tmp_path, one_page):
    page = (
        "# t\n"
        '{% import "_macros.j2" as m %}'
        '{{ m.findings_table(ctx, ctx.findings(round="round2") + ctx.findings(round="round1")) }}\n'
    )
    text = one_page(tmp_path, page, real_names=("_macros.j2",))
    assert "120,064 token" in text and "+0.053%" in text  # value with 千分位, signed error
    assert '<span class="ia-badge ia-fail">不吻合</span>' in text  # the failed reconciliation shows as failed
    assert "−20.0%" in text
    assert '<span class="ia-badge ia-na">无数据</span>' in text and "采样 CSV" in text  # n/a with its reason
    assert "\n\n| 量（来源） |" in text  # a table is a block of its own, never raw `| a | b |` text


def test_table_and_figure_render(tmp_path, one_page):
    text = one_page(
        tmp_path,
        '# t\n{{ table("points", ["concurrency", "ttft_ms"]) }}\n'
        '{{ figure("throughput", caption="看拐点。") }}\n',
    )
    assert "| 并发数 | 首 token 延迟（毫秒） |" in text  # headers from labels_zh.COLUMNS
    assert "| 64 | 1,235 |" in text
    assert "![吞吐随并发数的变化](figures/throughput.svg)" in text and "看拐点。" in text
    svg = (tmp_path / "docs" / "campaigns" / "demo" / "figures" / "throughput.svg").read_text()
    assert "<path" in svg and "吞吐随并发数的变化" in svg
    nav = json.loads((tmp_path / "docs" / ".nav.json").read_text())
    assert nav[1] == {"批次 demo": [{"t": "campaigns/demo/index.md"}]}  # one navigation section per campaign


def test_renderer_never_empties_a_folder_it_did_not_make(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "precious.md").write_text("keep")
    with pytest.raises(RenderError, match="not touching it"):
        render_site(_results(tmp_path), tmp_path / "docs")
    assert (tmp_path / "docs" / "precious.md").read_text() == "keep"


# -- figures
# ---------------------------------------------------------------------------------------------------


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


# -- raw-data index
# ---------------------------------------------------------------------------------------------


def _provenance(raw: Path, results: Path, findings: dict) -> list:
    """The analysis' provenance tables for campaign "demo", written and read back as the report reads them."""
    section = provenance.section("demo", [raw])
    (results / "demo" / "tables").mkdir(parents=True)
    for name, df in section.tables.items():
        write_table(results / "demo" / "tables" / f"{name}.csv", df)
    (results / "demo" / "findings.json").write_text(json.dumps(findings))
    c = load_campaign(results / "demo")
    runs = runs_of(c)
    return [runs, link_findings(runs, c.findings)]


def test_raw_index_sizes_hashes_provenance_and_users(tmp_path):
    src = tmp_path / "src" / "Round2" / "04-perf-test"
    src.mkdir(parents=True)
    payload = b'{"completed": 128}\n'
    (src / "stress.json").write_bytes(payload)
    list(import_results(tmp_path / "src", campaign="demo", raw_root=tmp_path / "raw"))
    findings = {
        "round2.overload.completed": {
            "round": "round2",
            "topic": "overload",
            "metric": "completed",
            "value": 128,
            "unit": "requests",
            "sources": ["Round2/04-perf-test/stress.json:completed"],
        },
        "round2.elsewhere": {
            "round": "round2",
            "metric": "elsewhere",
            "value": 1,
            "unit": "",
            "sources": ["Round9/x/y.json:z"],
        },
    }
    runs, unmatched = _provenance(tmp_path / "raw", tmp_path / "results", findings)
    (f,) = [f for r in runs for f in r.files]
    assert f.size == len(payload) and f.sha256 == hashlib.sha256(payload).hexdigest()  # hashed here, again
    assert f.source == "Round2/04-perf-test/stress.json"
    assert runs[0].origin == "src/Round2/04-perf-test" and runs[0].status == "complete"
    assert f.used_by == ["round2.overload.completed"]
    assert unmatched == ["Round9/x/y.json"]


def test_unsealed_run_is_listed_as_such(tmp_path):
    run = RawStore(tmp_path / "raw").create_run("demo", "r1", kind="collected")
    run.write_text("requests.jsonl", "{}\n")
    run.close_unsealed()
    (r,), _ = _provenance(tmp_path / "raw", tmp_path / "results", {})
    assert r.status == "unsealed" and [f.rel for f in r.files] == ["requests.jsonl"]


# -- the real templates on every campaign there is
# -------------------------------------------------------------
# The built site (tests/browser.py): the reference campaign when ../shared has it, the repository's raw/ (the
# CPU
# smoke campaign), and a synthetic H200-like campaign so that the comparison page exists.


@pytest.fixture(scope="module")
def built():
    import browser as br  # tests/browser.py: one build per test session, shared with the browser test

    return br.built_site()


@pytest.fixture(scope="module")
def reference_site(built):
    import browser as br

    if br.REFERENCE_CAMPAIGN not in built.campaigns:
        pytest.skip("reference campaign ../shared/seed-runs/rtx4090-qwen2.5-7b not present")
    return built


def _anchor(key: str) -> str:
    import re

    return 'id="f-' + re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-") + '"'


def _campaign_pages(docs: Path, campaign: str) -> str:
    pages = [*(docs / "campaigns" / campaign).glob("*.md"), docs / "structure" / f"{campaign}.md"]
    pages += [p for p in (docs / "differences.md",) if p.exists()]  # the reference campaign's differences
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def _figures_shown(docs: Path, campaign: str) -> set[str]:
    return {p.stem for p in (docs / "campaigns" / campaign / "figures").glob("*.svg")} | {
        p.stem for p in [*docs.glob(f"*/figures/{campaign}/*.svg"), *docs.glob(f"figures/{campaign}/*.svg")]
    }


def test_every_campaign_shows_every_finding_and_every_figure(built):
    assert len(built.campaigns) >= 2 and built.synthetic in built.campaigns
    for c in built.campaigns:
        findings = json.loads((built.results / c / "findings.json").read_text())
        pages = _campaign_pages(built.docs, c)
        missing = [k for k in findings if _anchor(k) not in pages]
        assert not missing, f"{c}: findings on no page: {missing}"
        specs = {p.name.removesuffix(".vl.json") for p in (built.results / c).rglob("*.vl.json")}
        # a page may leave out a figure that would mislead for this campaign, saying why (.figures.json)
        left_out = json.loads((built.docs / ".figures.json").read_text())["left_out"].get(c, {})
        assert all(reason.strip() for reason in left_out.values())
        assert specs and specs == _figures_shown(built.docs, c) | set(left_out), c
        assert not _figures_shown(built.docs, c) & set(left_out)


def test_comparison_page_shows_every_comparison_finding_and_figure(built):
    cdir = built.results / "_comparison"
    if not cdir.is_dir():
        pytest.skip("fewer than two campaigns analysed: no comparison")
    page = (built.docs / "comparison.md").read_text(encoding="utf-8")
    findings = json.loads((cdir / "comparison.json").read_text())
    missing = [k for k in findings if _anchor(k) not in page]
    assert not missing, f"comparison findings not on the comparison page: {missing}"
    specs = {p.name.removesuffix(".vl.json") for p in cdir.rglob("*.vl.json")}
    assert specs == _figures_shown(built.docs, "_comparison")


def test_comparison_speedup_checked_by_hand(reference_site):
    """The synthetic H200 steps 4.0 ms per token at concurrency 1 with Q4_K_M (tests/test_analysis_own.py);
    the reference's round-2 llama.cpp point at concurrency 1 says its median ITL in the raw file itself."""
    import browser as br

    raw = json.loads((br.reference_source() / "Round2" / "05-perf-test" / "llamacpp_c001.json").read_text())
    ref_ms, synth_ms = raw["median_itl_ms"], 4.0
    # the slower card (lower datasheet bandwidth: the 4090) comes first: speed-up = its step ÷ the H200's
    ratio = ref_ms / synth_ms
    text = f"{ratio:,.{max(0, 3 - int(math.floor(math.log10(ratio))))}f} 倍"
    page = (reference_site.docs / "comparison.md").read_text(encoding="utf-8")
    assert text in page, text  # four significant digits: 5.840 ÷ 4.0 = 1.460
    assert "跨批次对比" in page and "NVIDIA H200" in page


def test_cpu_campaign_is_labelled_as_a_smoke_test(built):
    import browser as br

    cpu = [
        c
        for c in built.campaigns
        if (br.REPO_RAW / c).is_dir()
        and any(
            json.loads((r / "run.json").read_text())["meta"].get("gpu") == "cpu"
            for r in (br.REPO_RAW / c).iterdir()
            if (r / "run.json").is_file()
        )
    ]
    if not cpu:
        pytest.skip("no CPU campaign in raw/")
    overview = (built.docs / "campaigns" / cpu[0] / "index.md").read_text(encoding="utf-8")
    assert "CPU 冒烟批次：这些数字不是 GPU 的数字" in overview and "噪声" in overview
    home = (built.docs / "index.md").read_text(encoding="utf-8")
    assert f"`{cpu[0]}`" in home and "数字与 GPU 批次不可比较" in home
    comparison = built.docs / "comparison.md"
    if comparison.exists():  # a CPU campaign is never put beside the GPUs
        text = comparison.read_text(encoding="utf-8")
        head = text.split("## 全部对比结论")[0]
        assert f"| {cpu[0]} |" not in head


def test_every_campaign_has_pages_and_nav_section(built):
    nav = json.loads((built.docs / ".nav.json").read_text(encoding="utf-8"))
    paths = json.dumps(nav, ensure_ascii=False)
    home = (built.docs / "index.md").read_text(encoding="utf-8")
    for c in built.campaigns:
        assert (built.docs / "campaigns" / c / "index.md").exists()
        assert f"campaigns/{c}/index.md" in paths
        assert f"`{c}`" in home  # the headline table covers every campaign
    if (built.docs / "comparison.md").exists():
        assert "comparison.md" in paths


def test_structure_page_lists_the_config_the_theory_used(reference_site):
    """Qwen2.5-7B-Instruct's config.json: hidden 3584, intermediate 18944, 28 layers, 28 heads, 4 KV heads,
    head_dim 3584 / 28 = 128, vocabulary 152064, embeddings not tied."""
    import browser as br

    page = (reference_site.docs / "structure" / f"{br.REFERENCE_CAMPAIGN}.md").read_text(encoding="utf-8")
    for row in (
        "| h | 隐藏维度 | `hidden_size` | 3,584 |",
        "| I | MLP 中间维度 | `intermediate_size` | 18,944 |",
        "| L | 层数 | `num_hidden_layers` | 28 |",
        "| H | 查询头数 | `num_attention_heads` | 28 |",
        "| K | KV 头数 | `num_key_value_heads` | 4 |",
        "| V | 词表大小 | `vocab_size` | 152,064 |",
        "| tied | 词嵌入与输出头共享权重 | `tie_word_embeddings` | 否 |",
    ):
        assert row in page, row
    assert "| d | 头维度 | `head_dim`（缺省为 h ÷ H） | 128 |" in page


def test_unplaced_figure_and_finding_fall_back_to_the_overview(built, tmp_path):
    """A figure or finding the analysis adds before any template places it is shown, not dropped."""
    import shutil

    c = built.synthetic
    results = tmp_path / "results"
    shutil.copytree(built.results / c, results / c)
    spec = json.loads((results / c / "figures" / "concurrency_throughput.vl.json").read_text())
    spec["title"] = "一张新图"
    (results / c / "figures" / "zz_brand_new.vl.json").write_text(json.dumps(spec, ensure_ascii=False))
    findings = json.loads((results / c / "findings.json").read_text())
    findings["zz.brand_new_quantity"] = {
        "topic": "zz",
        "metric": "brand_new_quantity",
        "value": 42,
        "unit": "tokens",
        "sources": [],
        "status": "ok",
    }
    (results / c / "findings.json").write_text(json.dumps(findings, ensure_ascii=False))
    render_site(results, tmp_path / "docs")
    overview = (tmp_path / "docs" / "campaigns" / c / "index.md").read_text(encoding="utf-8")
    other_figures = overview.split("## 其他图表")[1]
    assert "figures/zz_brand_new.svg" in other_figures and "一张新图" in other_figures
    assert _anchor("zz.brand_new_quantity") in overview.split("## 其他结论")[1] and "42 token" in overview
    # the reference campaign was not in these results: the home page says so
    home = (tmp_path / "docs" / "index.md").read_text(encoding="utf-8")
    assert "参考批次在本次构建中不可用" in home


def test_reference_site_marks_failed_findings_and_gates(reference_site):
    import browser as br

    findings = json.loads((reference_site.results / br.REFERENCE_CAMPAIGN / "findings.json").read_text())
    failed = [k for k, v in findings.items() if v["status"] == "mismatch"]
    pages = [*(reference_site.docs / "campaigns" / br.REFERENCE_CAMPAIGN).glob("*.md")]
    for k in failed:
        hits = [p for p in pages if _anchor(k) in p.read_text(encoding="utf-8")]
        assert hits, k
        row = next(line for line in hits[0].read_text(encoding="utf-8").splitlines() if _anchor(k) in line)
        assert "ia-fail" in row, f"{k}: a failed reconciliation is not shown as failed"


def test_reference_site_numbers_are_the_findings_formatted(reference_site):
    """Spot-check against the raw log by hand: round 2's vLLM log says `GPU KV cache size: 120,064 tokens`."""
    import hashlib

    import browser as br

    kv = (reference_site.docs / "campaigns" / br.REFERENCE_CAMPAIGN / "kv.md").read_text(encoding="utf-8")
    assert "日志报告的 KV 池为 120,064 token" in kv
    home = (reference_site.docs / "index.md").read_text(encoding="utf-8")
    assert "120,064 token" in home
    raw_index = (reference_site.docs / "data" / f"{br.REFERENCE_CAMPAIGN}.md").read_text(encoding="utf-8")
    stress = br.reference_source() / "Round2" / "04-perf-test" / "stress.json"
    assert hashlib.sha256(stress.read_bytes()).hexdigest() in raw_index  # hashed here, independently


def test_profile_of_an_own_gpu_campaign_with_random_weights():
    """Two llama.cpp runs with two weight formats (the H200 campaign's shape) → labels with the format, series
    picked by run, and the engine alone names neither format."""
    rows = [
        {"series": run, "round": None, "run": run, "engine": "llamacpp", "weight_format": fmt}
        for run, fmt in (("llamacpp-q4km", "q4_k_m"), ("llamacpp-f16", "fp16"))
    ]
    facts = {
        "collected": True,
        "cpu": False,
        "gpu": "h200",
        "gpu_display": "NVIDIA H200",
        "descriptions": ["H200, llama.cpp (CUDA), F16 GGUF of a random-weight model (random weights)"],
    }
    tables = {"roofline_points": Table("roofline_points", Path("."), list(rows[0]), rows)}
    c = CampaignResults("h200-x", Path("."), FindingSet(), tables, {}, {"profile": facts})
    p = build_profile(c, reference="rtx4090-qwen2.5-7b")
    assert p.collected and not p.cpu and p.random_weights and not p.is_reference
    assert p.gpu == "h200" and "H200" in (p.gpu_display or "")
    assert [s.label for s in p.series] == ["llama.cpp（F16）", "llama.cpp（Q4_K_M）"]
    assert [s.select for s in p.series] == [{"run": "llamacpp-f16"}, {"run": "llamacpp-q4km"}]
    assert p.engine_label("llamacpp") == "llama.cpp"  # two formats: the engine alone names neither
    with pytest.raises(RenderError, match="no campaign profile"):  # results from before the profile existed
        build_profile(CampaignResults("old", Path("."), FindingSet(), tables, {}), reference="r")


def test_the_analysis_writes_each_campaign_profile_the_report_reads(built):
    """index.json's profile, from what the runs recorded (tests/browser.py's synthetic H200 campaign: our
    collector, an H200 in its fingerprint); and a CPU campaign of raw/ is marked as such."""
    import browser as br

    for c in built.campaigns:
        facts = json.loads((built.results / c / "index.json").read_text())["profile"]
        assert set(facts) >= {"collected", "cpu", "gpu", "gpu_display", "descriptions"}
    synth = json.loads((built.results / built.synthetic / "index.json").read_text())["profile"]
    assert synth["collected"] and not synth["cpu"] and synth["gpu"] == "h200"
    if br.REFERENCE_CAMPAIGN in built.campaigns:
        ref = json.loads((built.results / br.REFERENCE_CAMPAIGN / "index.json").read_text())["profile"]
        assert not ref["collected"] and ref["gpu"] == "rtx4090"
    for c in built.campaigns:
        runs = (built.results / c / "tables" / "raw_runs.csv").read_text()
        if ",cpu," in runs:
            assert json.loads((built.results / c / "index.json").read_text())["profile"]["cpu"]


def test_home_row_of_measured_ceilings_renders_the_findings(built):
    """The H200 campaign's ceilings.json (raw/): copy 4.256 TB/s against the datasheet's 4.8 (−11.3 %, inside
    ±15 %), bf16 matmul 669 TFLOP/s against 989.4 (−32.3 %, beyond ±25 %), said without a verdict on the
    card."""
    h200 = "h200-qwen2.5-7b-random"
    if h200 not in built.campaigns:
        pytest.skip("the H200 campaign is not in raw/")
    home = (built.docs / "index.md").read_text(encoding="utf-8")
    (line,) = [
        line
        for line in home.splitlines()
        if line.startswith("- **这块卡实际能跑出多少带宽与算力？**") and "4.26 TB/s" in line
    ]
    assert (
        "4.26 TB/s](" in line and "（数据手册 4.80 TB/s，误差 −11.3%）" in line
    )  # the number links to its row
    assert "669 TFLOP/s](" in line and "（数据手册 989 TFLOP/s，误差 −32.3%）" in line
    # a GEMM at 669 TFLOP/s is what the card does, not a failure to "reach its rating" (issue #19 item 14)
    assert "没有跑到标称能力" not in line and f"campaigns/{h200}/concurrency.md" in line


def test_home_answers_first_every_number_from_a_finding(reference_site):
    """The reference campaign's headline spreads, checked against its round-2 result files by hand: vLLM
    61.86 → 1,388 token/s from 1 to 64 streams; p50 TTFT at concurrency 64 0.787 s (1,024 + 256 token) against
    169 s under overload (6,144 + 2,048 token)."""
    import browser as br

    src = br.reference_source() / "Round2"
    c1 = json.loads((src / "01-02-perf-test" / "vllm_c001.json").read_text())
    c64 = json.loads((src / "01-02-perf-test" / "vllm_c064.json").read_text())
    stress = json.loads((src / "04-perf-test" / "stress.json").read_text())
    home = (reference_site.docs / "index.md").read_text(encoding="utf-8")
    head = home.split("## ")[0]  # the conclusion box, before any section
    assert '!!! abstract "结论' in head
    assert f"{c1['output_throughput']:,.1f}" in head and f"{c64['output_throughput']:,.0f}" in head
    assert (
        f"{c64['median_ttft_ms'] / 1000:.3f} 秒" in head
        and f"{stress['median_ttft_ms'] / 1000:,.0f} 秒" in head
    )
    answers = home.split("## 关键问题")[1].split("## 意外的观察")[0]
    for question in ("同时服务多少个请求", "开始付代价", "更快的卡", "装不下", "量化", "选哪个引擎"):
        assert question in answers, question
    production = home.split("## 在生产上跑它")[1].split("## 可信度与局限")[0]
    # the recommended operating point (round 2 vLLM: 16, 681 tok/s, as the reference said), then six lines
    assert production.count("\n- **") == 7 and "](" in production
    assert "推荐的工作点（vLLM（bf16））**：并发 [16](" in production and "输出 681 token/s" in production
    trust = home.split("## 可信度与局限")[1].split("## ")[0]
    assert "vLLM（bf16）" in trust and "llama.cpp（Q4_K_M）" in trust  # reproducibility per engine
    assert "两个引擎中较大者" not in trust


def test_campaign_pages_open_with_their_conclusion_latest_round_first(reference_site):
    import browser as br

    pages = sorted((reference_site.docs / "campaigns" / br.REFERENCE_CAMPAIGN).glob("*.md"))
    for page in pages:
        text = page.read_text(encoding="utf-8")
        body = text.split("\n# ", 1)[1] if not text.startswith("# ") else text
        after_title = body.split("\n", 1)[1].lstrip()
        assert after_title.startswith('!!! abstract "结论"'), page.name
    kv = (reference_site.docs / "campaigns" / br.REFERENCE_CAMPAIGN / "kv.md").read_text(encoding="utf-8")
    tail = kv.split("## 结论与对账")[1]
    assert tail.index("**第二轮**") < tail.index('??? note "第一轮（较早的轮次）"')
    concurrency = (reference_site.docs / "campaigns" / br.REFERENCE_CAMPAIGN / "concurrency.md").read_text()
    for table in concurrency.split("## 结论与对账")[1].split("| 量（来源） |")[1:]:
        na = table.count(
            "ia-badge ia-na"
        )  # "无数据" once per missing input (its cause), not once per finding
        assert na == len(set(re.findall(r'ia-na">无数据</span><br><span class="ia-reason">([^<]+)<', table)))


def test_rates_page_only_where_rate_points_exist(built):
    """A campaign without open-loop points gets no rates page (the reference: closed-loop files only); one
    with them (our CPU campaign's llamacpp-rate run) does."""
    with_rates = set()
    for c in built.campaigns:
        table = built.results / c / "tables" / "rate_points.csv"
        has_rows = table.is_file() and len(table.read_text(encoding="utf-8").strip().splitlines()) > 1
        assert (built.docs / "campaigns" / c / "rates.md").is_file() == has_rows, c
        if has_rows:
            with_rates.add(c)
    assert with_rates and with_rates != set(built.campaigns)


def _article_links(html: str) -> list[str]:
    """The hrefs of the page's own text (its <article>), not the theme's navigation, which links every page
    to itself, nor the headings' own permalink anchors."""
    article = html[html.find("<article") : html.find("</article>")]
    return [
        h
        for cls, h in re.findall(r'<a\b(?:[^>]*?class="([^"]*)")?[^>]*?href="([^"]*)"', article)
        if "headerlink" not in (cls or "")
    ]


def test_every_link_in_page_text_leads_somewhere_else_that_exists(built):
    """Each link written in a page's text (every page of every campaign) resolves: to another page that
    exists, or to an anchor that exists on the page it names. A link back to the page itself without an anchor
    (an overview's questions once pointed at the overview) is a dead end."""
    import urllib.parse

    problems, n = [], 0
    ids: dict[Path, set[str]] = {}
    site = built.site.resolve()
    for page in sorted(site.rglob("index.html")):
        html = page.read_text(encoding="utf-8")
        for href in _article_links(html):
            parts = urllib.parse.urlsplit(href)
            if parts.scheme or href.startswith("mailto:"):
                continue
            n += 1
            path = urllib.parse.unquote(parts.path)
            target = (page.parent / path).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            rel = page.relative_to(site).as_posix()
            if not target.is_file():
                problems.append(f"{rel}: {href} leads to no file")
                continue
            if target == page and not parts.fragment:
                problems.append(f"{rel}: {href} leads back to the page itself")
            if parts.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = set(re.findall(r'\bid="([^"]+)"', target.read_text(encoding="utf-8")))
                if urllib.parse.unquote(parts.fragment) not in ids[target]:
                    problems.append(f"{rel}: {href} names no element of {target.relative_to(site)}")
    assert n > 200, n
    assert not problems, "\n".join(problems[:40])


def test_differences_page_argues_each_difference_from_its_finding(reference_site):
    """「与参考研究不同之处」 has each difference under its stable anchor with the number of the finding that
    decides it; the round-1 repeat spread is checked against the two bench JSONs read here by hand."""
    import browser as br

    from analysis.report.differences_page import ANCHORS

    page = (reference_site.docs / "differences.md").read_text(encoding="utf-8")
    findings = json.loads((reference_site.results / br.REFERENCE_CAMPAIGN / "findings.json").read_text())
    for anchor, key in ANCHORS.items():
        assert f"{{ #{anchor} }}" in page, anchor
        assert key in findings and findings[key]["value"] is not None, key
    src = br.reference_source() / "Round1"
    p99 = [
        json.loads((src / t / "c004.json").read_text())["p99_itl_ms"]
        for t in ("01-perf-test", "02-perf-test")
    ]
    spread = (max(p99) - min(p99)) / (sum(p99) / 2) * 100
    assert findings[ANCHORS["round1-c4-p99-itl"]]["value"] == pytest.approx(spread, rel=1e-9)
    assert f"{spread:.1f}%" in page  # the page states it at the finding's precision
    # the TTFT growth's queue share from the per-point table's own means (mean queue, mean TTFT)
    pts = {
        r["point"]: r
        for r in csv.DictReader(
            (reference_site.results / br.REFERENCE_CAMPAIGN / "tables" / "points.csv").open()
        )
        if r["round"] == "round2" and r["test"] == "01-02-perf-test"
    }
    lo, hi = pts["vllm_c001"], pts["vllm_c064"]
    share = (float(hi["mean_queue_ms"]) - float(lo["mean_queue_ms"])) / (
        float(hi["mean_ttft_ms"]) - float(lo["mean_ttft_ms"])
    )
    assert findings[ANCHORS["ttft-growth"]]["value"] == pytest.approx(share * 100, rel=1e-6)
    home = (reference_site.docs / "index.md").read_text(encoding="utf-8")
    assert "](differences.md)" in home
