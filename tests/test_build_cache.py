"""The site build's caches (issue #25 item 3): a campaign's analysis is reused only while its sealed runs, the
files outside the store it reads, the analysis code and the options are the same; a converted figure and a
compiled template only while what decides them is the same; a cache file that does not match its own digest
is said in one line and computed afresh, never used.

Real files throughout: a committed sealed run (raw/cpu-tiny-qwen2/llamacpp), runs written through the store,
the real analysis, vl-convert and jinja.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.core.metrics import DEFAULT_PERCENTILES
from analysis.pipeline import analyze as pipeline
from analysis.pipeline import cache
from analysis.report import build_cache
from analysis.report.env import make_env
from analysis.report.figures import convert_unique
from collector.raw.decisions import record_decision
from collector.raw.store import MANIFEST, RawStore

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = "cpu-tiny-qwen2"
RUN = REPO / "raw" / CAMPAIGN / "llamacpp"
OPTIONS = {"slos_ms": {}, "percentiles": list(DEFAULT_PERCENTILES)}  # what analyze keys by default


def _raw(tmp_path: Path) -> Path:
    raw = tmp_path / "raw"
    shutil.copytree(RUN, raw / CAMPAIGN / RUN.name)
    return raw


def _store_copy(raw: Path, name: str, replace: dict[str, bytes] | None = None, seal: bool = True) -> Path:
    """RUN's files written through the store as a new run (some replaced), sealed or left unsealed."""
    info = json.loads((RUN / "run.json").read_text())
    run = RawStore(raw).create_run(CAMPAIGN, name, kind=info["kind"], meta=info["meta"])
    for rel in sorted(json.loads((RUN / MANIFEST).read_text())["files"]):
        run.write_bytes(rel, (replace or {}).get(rel, (RUN / rel).read_bytes()), source="copy")
    if seal:
        run.seal("complete")
    else:
        run.close_unsealed()
    return run.path


def _key(raw: Path) -> str:
    return cache.entry_key([raw], CAMPAIGN, OPTIONS)


def _tree(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _analyze(raw: Path, out: Path, store: Path) -> list[str]:
    return list(pipeline.analyze([raw], out, None, cache=store))


def _no_analysis(*_args, **_kw):
    raise AssertionError("analysed although the cache held the campaign")


@pytest.fixture(scope="module")
def analysed_once(tmp_path_factory) -> tuple[Path, list[str]]:
    """RUN's campaign analysed once with a cache: the folder holding raw/, a/ (the results) and cache/."""
    where = tmp_path_factory.mktemp("analysed")
    return where, _analyze(_raw(where), where / "a", where / "cache")


@pytest.fixture
def warm(tmp_path, analysed_once) -> tuple[Path, Path, list[str]]:
    """A copy of it for one test: (raw, cache), the lines the first analysis printed, about a/."""
    where, lines = analysed_once
    for name in ("raw", "a", "cache"):
        shutil.copytree(where / name, tmp_path / name)
    return tmp_path / "raw", tmp_path / "cache", [line.replace(str(where), str(tmp_path)) for line in lines]


# ------------------------------------------------------------------------------------------ campaign analysis


def test_an_unchanged_campaign_is_reused_byte_for_byte(tmp_path, warm, monkeypatch):
    raw, store, first = warm
    monkeypatch.setattr(pipeline, "_analyze_campaign", _no_analysis)
    again = _analyze(raw, tmp_path / "b", store)
    assert again[0].startswith(f"{CAMPAIGN}: inputs and analysis code unchanged: results reused")
    assert again[1:] == [line.replace(str(tmp_path / "a"), str(tmp_path / "b")) for line in first]
    assert _tree(tmp_path / "b") == _tree(tmp_path / "a")


def test_the_key_moves_with_every_input_the_analysis_reads(tmp_path):
    raw = _raw(tmp_path)
    keys = [_key(raw)]
    assert _key(raw) == keys[0]  # nothing changed: the same key
    _store_copy(raw, "second")  # a new sealed run
    keys.append(_key(raw))
    cut = _store_copy(raw, "cut", seal=False)  # an unsealed run: its files themselves count
    keys.append(_key(raw))
    (cut / "server.log").write_bytes((cut / "server.log").read_bytes() + b"one more line\n")
    keys.append(_key(raw))
    record_decision(raw / CAMPAIGN / "second", "exclude", "a test")  # decisions.jsonl beside the runs
    keys.append(_key(raw))
    keys.append(cache.entry_key([raw], CAMPAIGN, {**OPTIONS, "percentiles": [50.0]}))
    assert len(set(keys)) == len(keys)


def test_a_run_sealed_with_a_different_file_has_another_key(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _store_copy(a, "run")
    requests = (RUN / "requests.jsonl").read_bytes()
    _store_copy(b, "run", replace={"requests.jsonl": requests.replace(b'"ok":true', b'"ok":false', 1)})
    assert _key(a) != _key(b)


def test_the_plan_file_a_run_names_outside_the_store_counts(tmp_path):
    raw = _raw(tmp_path)
    info = json.loads((RUN / "run.json").read_text())
    info["meta"]["plan_file"] = "plans/the-plan.toml"  # relative to the folder holding the store
    run = RawStore(raw).create_run(CAMPAIGN, "planned", kind=info["kind"], meta=info["meta"])
    run.write_bytes("requests.jsonl", (RUN / "requests.jsonl").read_bytes())
    run.seal("complete")
    before = _key(raw)
    (tmp_path / "plans").mkdir()
    (tmp_path / "plans" / "the-plan.toml").write_text("# a plan\n")
    assert _key(raw) != before


def test_the_code_identity_moves_with_any_analysis_file(tmp_path):
    for rel in cache.CODE_PATHS:
        src, dst = REPO / rel, tmp_path / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
        else:
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache.code_identity(tmp_path)
    assert before == cache.code_identity(REPO)  # the same files: the same identity
    (tmp_path / "analysis" / "core" / "models" / "extra.json").write_text("{}\n")
    after = cache.code_identity.__wrapped__(tmp_path)
    assert after != before


def test_changed_code_identity_analyses_afresh(tmp_path, warm, monkeypatch):
    raw, store, _ = warm
    monkeypatch.setattr(cache, "code_identity", lambda: "another analysis")
    lines = _analyze(raw, tmp_path / "b", store)
    assert not any("reused" in line for line in lines)
    assert [p.name for p in (store / CAMPAIGN).iterdir()] == [_key(raw)]  # only the newest entry is kept


def test_a_corrupt_entry_is_said_in_one_line_and_analysed_afresh(tmp_path, warm):
    raw, store, _ = warm
    entry = store / CAMPAIGN / _key(raw)
    findings = entry / "out" / "findings.json"
    findings.write_bytes(findings.read_bytes().replace(b'"ok"', b'"mismatch"', 1))  # still JSON
    lines = _analyze(raw, tmp_path / "b", store)
    said = [line for line in lines if "cache" in line]
    assert said == [
        f"{CAMPAIGN}: cache entry {entry} not used (out/findings.json: sha256 differs from ENTRY.json): "
        "analysed afresh"
    ]
    assert _tree(tmp_path / "b") == _tree(tmp_path / "a")
    assert cache.AnalysisCache(store).problem(CAMPAIGN, _key(raw)) is None  # written anew


def test_an_entry_without_its_digest_file_is_not_used(warm):
    raw, store, _ = warm
    (store / CAMPAIGN / _key(raw) / cache.ENTRY_FILE).unlink()
    assert cache.AnalysisCache(store).problem(CAMPAIGN, _key(raw)) == "ENTRY.json missing or unreadable"


# ---------------------------------------------------------------------------------- figures and templates

SPEC = {
    "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
    "title": "测试图",
    "data": {"values": [{"x": 1, "y": 2}, {"x": 2, "y": 3}]},
    "mark": "line",
    "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"}},
}


def test_a_figure_is_converted_once_and_a_tampered_svg_afresh(tmp_path, monkeypatch):
    import analysis.report.figures as figures

    svgs = build_cache.SvgCache(tmp_path)
    first = convert_unique([SPEC, dict(SPEC)], svgs)  # the same spec twice: converted once
    assert first[0] == first[1] and len(list(tmp_path.rglob("*.svg"))) == 1
    monkeypatch.setattr(figures, "convert_all", lambda specs: [] if not specs else _no_analysis())
    assert convert_unique([SPEC], svgs) == first[:1] and svgs.notes == []
    kept = next(tmp_path.rglob("*.svg"))
    kept.write_bytes(kept.read_bytes().replace(b"<svg", b"<svg data-x='1'", 1))
    monkeypatch.undo()
    assert convert_unique([SPEC], svgs) == first[:1]
    assert svgs.notes == [
        f"figure cache: {kept}: its content does not match its sha256 line; converted afresh"
    ]


def test_a_compiled_template_is_reused_and_a_tampered_one_compiled_afresh(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "page.md.j2").write_text("{{ 1234567 | int }} 个\n", encoding="utf-8")
    want = make_env(tmp_path / "t").get_template("page.md.j2").render()
    assert make_env(tmp_path / "t", tmp_path / "c").get_template("page.md.j2").render() == want
    (kept,) = (tmp_path / "c").rglob("*.jinja")
    kept.write_bytes(kept.read_bytes()[:-8] + b"garbage!")
    env = make_env(tmp_path / "t", tmp_path / "c")
    assert env.get_template("page.md.j2").render() == want
    assert env.bytecode_cache.notes == [  # type: ignore[union-attr]
        f"template cache: {kept}: its content does not match its sha256 line; compiled afresh"
    ]


@pytest.mark.parametrize("bad", [b"", b"no newline", b"0" * 64 + b"\n<svg/>"])
def test_checked_files_never_return_data_that_does_not_match(tmp_path, bad):
    files = build_cache.CheckedFiles(tmp_path, ".svg")
    files.put("ab" * 32, b"<svg>good</svg>")
    assert files.get("ab" * 32) == (b"<svg>good</svg>", None)
    files.path("ab" * 32).write_bytes(bad)
    data, problem = files.get("ab" * 32)
    assert data is None and problem and "does not match" in problem


# -------------------------------------------------------------------------------------------- the built site


def test_the_site_is_copied_while_its_pages_are_unchanged_and_built_when_one_changes(tmp_path):
    from analysis.report.build import mkdocs_build_cached

    docs, site, store = tmp_path / "docs", tmp_path / "site", tmp_path / "cache"
    docs.mkdir()
    (docs / "index.md").write_text("# 首页\n\n一段话。\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"  # a plain theme: the cache, not the theme, is under test
    config.write_text("site_name: t\nstrict: true\nplugins: []\n", encoding="utf-8")
    assert mkdocs_build_cached(docs, site, store, config) == f"site: built {site} with mkdocs"
    built = _tree(site)
    (site / "stale.html").write_text("from an earlier build")
    said = mkdocs_build_cached(docs, site, store, config)
    assert said.startswith(f"site: docs and config unchanged: {site} copied from the cache")
    assert _tree(site) == built  # the stale file gone, as mkdocs cleans its site folder
    (docs / "index.md").write_text("# 首页\n\n另一段话。\n", encoding="utf-8")
    assert mkdocs_build_cached(docs, site, store, config) == f"site: built {site} with mkdocs"
    assert "另一段话" in (site / "index.html").read_text(encoding="utf-8")
    (kept,) = (store / "site").iterdir()
    index = kept / "out" / "index.html"
    index.write_text(index.read_text(encoding="utf-8") + "tampered", encoding="utf-8")
    said = mkdocs_build_cached(docs, site, store, config)
    why = "out/index.html: sha256 differs from ENTRY.json"
    assert said == f"site: built {site} with mkdocs (cache entry not used: {why})"
