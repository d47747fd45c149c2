"""The raw store never loses or silently changes a byte: create-only, atomic, tamper-evident, crash-safe."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from collector.cli import main
from collector.raw.errors import StoreError
from collector.raw.store import MANIFEST, SEAL, RawStore, verify


def _sealed_run(root: Path) -> Path:
    run = RawStore(root).create_run("camp", "r1", kind="test", meta={"engine": "none"})
    run.write_text("a.txt", "alpha\n")
    run.write_json("sub/b.json", {"x": 1})
    with run.open_stream("log.txt") as s:
        s.write_line("one")
        s.write_line("two")
    run.seal()
    return root / "camp" / "r1"


def test_files_and_manifest_hashes_match_independent_sha256(tmp_path):
    run_dir = _sealed_run(tmp_path)
    manifest = json.loads((run_dir / MANIFEST).read_text())
    assert set(manifest["files"]) == {"a.txt", "sub/b.json", "log.txt"}
    assert manifest["files"]["a.txt"]["sha256"] == hashlib.sha256(b"alpha\n").hexdigest()
    assert manifest["files"]["log.txt"]["size"] == len(b"one\ntwo\n")
    assert (run_dir / SEAL).read_text().strip() == hashlib.sha256(
        (run_dir / MANIFEST).read_bytes()
    ).hexdigest()
    assert manifest["status"] == "complete"
    # run.json and the journal are covered too, outside ``files`` (whose readers expect data files only)
    for rel in ("run.json", "journal.jsonl"):
        data = (run_dir / rel).read_bytes()
        assert manifest["bookkeeping"][rel] == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    report = verify(tmp_path)
    assert report.ok and report.runs == 1 and report.sealed == 1 and report.files == 3 + 2


def test_overwrite_is_refused_and_the_first_bytes_stay(tmp_path):
    run = RawStore(tmp_path).create_run("camp", "r1", kind="test")
    run.write_text("a.txt", "first")
    with pytest.raises(StoreError, match="already exists"):
        run.write_text("a.txt", "second")
    with pytest.raises(StoreError, match="already exists"):
        run.open_stream("a.txt")
    assert (tmp_path / "camp/r1/a.txt").read_text() == "first"
    with pytest.raises(StoreError, match="run already exists"):
        RawStore(tmp_path).create_run("camp", "r1", kind="test")


def test_sealed_run_takes_no_more_writes(tmp_path):
    run = RawStore(tmp_path).create_run("camp", "r1", kind="test")
    run.write_text("a.txt", "x")
    run.seal()
    with pytest.raises(StoreError, match="sealed"):
        run.write_text("b.txt", "y")


@pytest.mark.parametrize("bad", ["../escape.txt", "/abs.txt", "manifest.json", "SEALED", ".tmp-x"])
def test_paths_outside_the_run_or_reserved_are_refused(tmp_path, bad):
    run = RawStore(tmp_path).create_run("camp", "r1", kind="test")
    with pytest.raises(StoreError):
        run.write_text(bad, "x")


def test_one_flipped_byte_is_detected_and_named(tmp_path):
    run_dir = _sealed_run(tmp_path)
    target = run_dir / "sub/b.json"
    data = bytearray(target.read_bytes())
    data[3] ^= 0x01
    target.write_bytes(bytes(data))
    report = verify(tmp_path)
    assert not report.ok
    problems = [f for f in report.findings if f.level == "problem"]
    assert len(problems) == 1 and problems[0].path.endswith("sub/b.json") and "sha256" in problems[0].what


def test_missing_and_unexpected_files_are_reported(tmp_path):
    run_dir = _sealed_run(tmp_path)
    (run_dir / "a.txt").unlink()
    (run_dir / "stray.txt").write_text("?")
    result = CliRunner().invoke(main, ["verify", "--raw", str(tmp_path)])
    assert result.exit_code == 1
    assert "a.txt: missing" in result.output
    assert "stray.txt: unexpected" in result.output


def test_tampered_manifest_is_detected(tmp_path):
    run_dir = _sealed_run(tmp_path)
    m = run_dir / MANIFEST
    m.write_text(m.read_text().replace('"complete"', '"completE"'))
    assert not verify(tmp_path).ok


_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import collector.raw.store as store

    run = store.RawStore(Path(sys.argv[1])).create_run("camp", "crash", kind="test")
    run.write_text("done.txt", "finished before the crash\\n")
    s = run.open_stream("requests.jsonl")
    s.write_line('{"id": 1}')
    s.write_line('{"id": 2}')

    def stuck(src, dst):  # the kill lands after the temp file is written, before it gets its name
        print("in-write", flush=True)
        time.sleep(60)

    store.os.link = stuck
    run.write_bytes("big.bin", b"x" * 1_000_000)
    """
)


def test_kill_mid_write_leaves_an_unsealed_run_whose_written_files_verify(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "in-write"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    run_dir = tmp_path / "camp/crash"
    assert not (run_dir / SEAL).exists() and not (run_dir / "big.bin").exists()
    assert (run_dir / "requests.jsonl").read_text() == '{"id": 1}\n{"id": 2}\n'
    report = verify(tmp_path)
    assert report.ok, report.lines()
    assert report.runs == 1 and report.sealed == 0 and report.files == 1  # done.txt, journaled and re-hashed
    notes = "\n".join(report.lines())
    assert "unsealed" in notes and "leftover of an interrupted write" in notes and "requests.jsonl" in notes
    info = next(RawStore(tmp_path).iter_runs())
    assert not info.sealed
    # the interrupted run is never reused: a new run gets a new name
    assert RawStore(tmp_path).unique_run_name("camp", "crash") == "crash-2"


def test_a_file_changed_in_an_unsealed_run_is_caught_by_the_journal(tmp_path):
    run = RawStore(tmp_path).create_run("camp", "open", kind="test")
    run.write_text("a.txt", "abc")
    run.close_unsealed()
    (tmp_path / "camp/open/a.txt").write_text("abd")
    assert not verify(tmp_path).ok


def test_verify_on_missing_store_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(main, ["verify", "--raw", str(tmp_path / "nope")])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "no raw store here" in result.output


def test_stream_survives_without_close(tmp_path):
    run = RawStore(tmp_path).create_run("camp", "r", kind="test")
    s = run.open_stream("server.log")
    s.write(b"partial line without newline")
    # no close, no seal: what was written is on disk already (flushed per write)
    time.sleep(0)
    assert (tmp_path / "camp/r/server.log").read_bytes() == b"partial line without newline"
