"""`collector import` of the real reference campaign: byte-identical, classified, idempotent."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.raw.store import MANIFEST, RawStore
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason=f"reference campaign not found at {SEED}")

EXPECTED = {
    "campaign-docs": ("", "documents", None),
    "round1-01-perf-test": ("vllm", "concurrency_sweep", "Round1"),
    "round1-02-perf-test": ("vllm", "concurrency_sweep", "Round1"),
    "round1-03-perf-test": ("vllm", "length_sweep", "Round1"),
    "round1-04-perf-test": ("vllm", "overload", "Round1"),
    "round1-05-perf-test": ("llamacpp", "engine_comparison", "Round1"),
    "round2-01-02-perf-test": ("vllm", "concurrency_sweep", "Round2"),
    "round2-03-perf-test": ("vllm", "length_sweep", "Round2"),
    "round2-04-perf-test": ("vllm", "overload", "Round2"),
    "round2-05-perf-test": ("llamacpp", "engine_comparison", "Round2"),
}


def _import(raw: Path) -> str:
    result = CliRunner().invoke(main, ["import", str(SEED), "--campaign", "ref", "--raw", str(raw)])
    assert result.exit_code == 0, result.output
    return result.output


def test_import_is_byte_identical_classified_and_verifies(tmp_path):
    raw = tmp_path / "raw"
    _import(raw)
    runs = {r.name: r for r in RawStore(raw).iter_runs("ref")}
    assert set(runs) == set(EXPECTED)
    for name, (engine, kind, rnd) in EXPECTED.items():
        meta = runs[name].meta
        assert (meta["engine"], meta["test_kind"], meta["round"]) == (engine, kind, rnd), name
        assert runs[name].sealed
    source_files = sorted(p for p in SEED.rglob("*") if p.is_file())
    copied = 0
    for src in source_files:
        rel = src.relative_to(SEED)
        run = "campaign-docs" if len(rel.parts) == 1 else "-".join(rel.parts[:-1]).lower()
        dst = raw / "ref" / run / src.name
        assert dst.read_bytes() == src.read_bytes(), rel
        manifest = json.loads((raw / "ref" / run / MANIFEST).read_text())
        assert manifest["files"][src.name]["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
        assert manifest["files"][src.name]["source"] == rel.as_posix()
        copied += 1
    assert copied == len(source_files) == 72
    result = CliRunner().invoke(main, ["verify", "--raw", str(raw)])
    # 72 data files + each run's run.json and journal.jsonl (hashed in the manifest's bookkeeping)
    assert result.exit_code == 0
    assert "OK: 10 runs (10 sealed-complete, 0 sealed-failed, 0 unsealed), 92 files" in result.output


def test_importing_twice_changes_nothing(tmp_path):
    raw = tmp_path / "raw"
    _import(raw)
    before = {p: p.read_bytes() for p in raw.rglob("*") if p.is_file()}
    out = _import(raw)
    assert out.count("unchanged") == len(EXPECTED)
    after = {p: p.read_bytes() for p in raw.rglob("*") if p.is_file()}
    assert before == after


def test_reimport_of_a_changed_source_is_refused_and_alters_nothing(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(SEED / "Round2" / "04-perf-test", src / "Round2" / "04-perf-test")
    raw = tmp_path / "raw"
    assert CliRunner().invoke(main, ["import", str(src), "--campaign", "c", "--raw", str(raw)]).exit_code == 0
    stress = src / "Round2/04-perf-test/stress.json"
    stress.write_text(stress.read_text().replace('"failed": 0', '"failed": 1'))
    before = {p: p.read_bytes() for p in raw.rglob("*") if p.is_file()}
    result = CliRunner().invoke(main, ["import", str(src), "--campaign", "c", "--raw", str(raw)])
    assert result.exit_code == 1 and "different content" in result.output and "stress.json" in result.output
    assert before == {p: p.read_bytes() for p in raw.rglob("*") if p.is_file()}


def test_unrecognised_test_folder_is_a_one_line_error(tmp_path):
    (tmp_path / "src/Round9/x").mkdir(parents=True)
    (tmp_path / "src/Round9/x/notes.txt").write_text("?")
    result = CliRunner().invoke(
        main, ["import", str(tmp_path / "src"), "--campaign", "c", "--raw", str(tmp_path / "r")]
    )
    assert result.exit_code == 1 and "cannot tell what this test folder holds" in result.output
