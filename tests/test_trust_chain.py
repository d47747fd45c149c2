"""The trust chain (issue #12): analyze reads only runs that verify, every finding says which kind of run it
comes from, one run that cannot be parsed never stops the rest of its campaign, an interrupted seal can be
finished only when measuring had ended, and an interrupted run creation never makes verify fail.

Everything here works on real files: copies of a committed run (raw/cpu-tiny-qwen2) and runs written through
the store itself, with the real parsers, the real analysis and the real CLI.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.pipeline.analyze import analyze
from collector.cli import main
from collector.raw.errors import StoreError
from collector.raw.store import MANIFEST, SEAL, TMP_PREFIX, RawStore, open_run, recover_seal, verify

REPO = Path(__file__).resolve().parents[1]
CAMPAIGN = "cpu-tiny-qwen2"
GOOD = REPO / "raw" / CAMPAIGN / "llamacpp"  # sealed before run.json/journal were hashed (legacy manifest)
VLLM = REPO / "raw" / CAMPAIGN / "vllm"


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _copy(src: Path, raw: Path) -> Path:
    """A byte-for-byte copy of a committed run, under its own campaign and name (as run.json says)."""
    dst = raw / src.parent.name / src.name
    shutil.copytree(src, dst)
    return dst


def _store_copy(
    raw: Path, src: Path, name: str, status: str | None, replace: dict[str, bytes] | None = None
) -> Path:
    """A new run written through the store with ``src``'s files (some replaced), then sealed with ``status``
    or left unsealed (None): what the collector would have left behind."""
    info = json.loads((src / "run.json").read_text())
    run = RawStore(raw).create_run(info["campaign"], name, kind=info["kind"], meta=info["meta"])
    for rel in sorted(json.loads((src / MANIFEST).read_text())["files"]):
        run.write_bytes(rel, (replace or {}).get(rel, (src / rel).read_bytes()), source=f"copy of {src.name}")
    if status is None:
        run.close_unsealed()
    else:
        run.seal(status)
    return run.path


def _findings(out: Path) -> dict:
    return json.loads((out / CAMPAIGN / "findings.json").read_text())


def _index(out: Path) -> dict:
    return json.loads((out / CAMPAIGN / "index.json").read_text())


def _one_problem(output: str) -> str:
    problems = [line for line in output.splitlines() if line.startswith("PROBLEM: ")]
    assert len(problems) == 1, output
    return problems[0]


def _shift_a_digit(path: Path) -> None:
    """Change one byte of a sealed file so that it still parses: the last digit of the first end time."""
    data = bytearray(path.read_bytes())
    m = re.search(rb'"end_mono_ns":(\d+)', data)
    i = m.end(1) - 1
    data[i] = ord("0") + (data[i] - ord("0") + 1) % 10
    path.write_bytes(bytes(data))


# -------------------------------------------------------------------------------- analyze verifies first


def test_a_changed_byte_in_a_sealed_run_stops_analyze_with_verifys_line(tmp_path):
    raw = tmp_path / "raw"
    run = _copy(GOOD, raw)
    _shift_a_digit(run / "requests.jsonl")

    v = _cli("verify", "--raw", str(raw))
    assert v.exit_code == 1
    line = _one_problem(v.output)
    assert line == f"PROBLEM: {run / 'requests.jsonl'}: changed: sha256 differs from the manifest"

    out = tmp_path / "res"
    a = _cli("analyze", "--raw", str(raw), "--out", str(out))
    assert a.exit_code == 1
    assert a.output.count("\n") == 1 and line in a.output and "--no-verify" in a.output
    assert not out.exists()  # refused before anything was written

    # forensics: read anyway, and the results say they were not verified
    f = _cli("analyze", "--raw", str(raw), "--out", str(out), "--no-verify")
    assert f.exit_code == 0, f.output
    assert "UNVERIFIED" in f.output
    assert _index(out)["verified"] is False
    assert _findings(out)  # analysed

    good = tmp_path / "good"
    _copy(GOOD, good)
    list(analyze([good], tmp_path / "res-good", None))
    assert _index(tmp_path / "res-good")["verified"] is True


def test_a_changed_file_in_an_unsealed_run_stops_analyze_too(tmp_path):
    raw = tmp_path / "raw"
    run = _store_copy(raw, GOOD, "cut", None)
    _shift_a_digit(run / "requests.jsonl")  # journaled when it was closed: the journal has its hash
    a = _cli("analyze", "--raw", str(raw), "--out", str(tmp_path / "res"))
    assert a.exit_code == 1
    assert f"PROBLEM: {run / 'requests.jsonl'}: changed: sha256 differs from the journal" in a.output


# ---------------------------------------------------------------------------------- run.json is covered


def _edit_json(path: Path, change) -> None:
    obj = json.loads(path.read_text())
    change(obj)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize(
    ("how", "expect"),
    [
        ("truncate", "run.json: not valid JSON"),
        ("drop-meta", "run.json: field 'meta' missing"),
        ("created", "run.json: changed: created differs from the manifest"),
        ("campaign", "run.json: changed: campaign 'other' but the folder is 'cpu-tiny-qwen2'"),
    ],
)
def test_run_json_of_a_committed_run_is_checked(tmp_path, how, expect):
    """Runs sealed before run.json was hashed (every run in raw/ today): its shape, and its campaign, run and
    created against the manifest and the folder."""
    raw = tmp_path / "raw"
    run = _copy(GOOD, raw)
    p = run / "run.json"
    if how == "truncate":
        p.write_bytes(p.read_bytes()[:-40])
    elif how == "drop-meta":
        _edit_json(p, lambda o: o.pop("meta"))
    elif how == "created":
        _edit_json(p, lambda o: o["created"].update(wall="2026-01-01T00:00:00.000+00:00"))
    else:
        _edit_json(p, lambda o: o.update(campaign="other"))
    v = _cli("verify", "--raw", str(raw))
    assert v.exit_code == 1
    assert expect in _one_problem(v.output)
    a = _cli("analyze", "--raw", str(raw), "--out", str(tmp_path / "res"))
    assert a.exit_code == 1 and expect in a.output and a.output.count("\n") == 1


@pytest.mark.parametrize("rel", ["run.json", "journal.jsonl"])
def test_run_json_and_journal_of_a_new_run_are_in_the_manifest(tmp_path, rel):
    raw = tmp_path / "raw"
    run = _store_copy(raw, GOOD, "new", "complete")
    manifest = json.loads((run / MANIFEST).read_text())
    data = (run / rel).read_bytes()
    assert manifest["bookkeeping"][rel]["sha256"] == hashlib.sha256(data).hexdigest()
    assert verify(raw).ok
    # an edit that keeps the file valid: the engine in run.json's meta, a source in the journal
    (run / rel).write_bytes(data.replace(b'"llamacpp"', b'"vllm"', 1).replace(b"copy of", b"copy on", 1))
    v = _cli("verify", "--raw", str(raw))
    assert v.exit_code == 1
    assert _one_problem(v.output).startswith(f"PROBLEM: {run / rel}: changed:")


# ----------------------------------------------------------- a run that cannot be parsed stops nothing else


def _cut_inside_a_timing_block(log: bytes) -> bytes:
    lines = log.splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if b"prompt eval time" in line)
    return b"".join(lines[: i + 1])


def test_a_run_that_cannot_be_parsed_leaves_the_rest_of_the_campaign_as_it_was(tmp_path):
    alone = tmp_path / "alone"
    _copy(GOOD, alone)
    list(analyze([alone], tmp_path / "res-alone", None))
    want = _findings(tmp_path / "res-alone")

    mixed = tmp_path / "mixed"
    _copy(GOOD, mixed)
    log = (GOOD / "server.log").read_bytes()
    requests = (GOOD / "requests.jsonl").read_bytes()
    bad = {
        # a typo'd server path: the log holds only the shell's complaint, the run sealed as failed
        "typo-server": ({"server.log": b"exec: /opt/llama-servr: No such file or directory\n"}, "failed"),
        # killed before the server wrote a line: an empty log, never sealed
        "killed-early": ({"server.log": b""}, None),
        # the disk filled up mid-line: requests.jsonl ends without a newline, sealed as failed
        "disk-full": ({"requests.jsonl": requests[: len(requests) - 50]}, "failed"),
        # the log ends inside a timing block
        "cut-log": ({"server.log": _cut_inside_a_timing_block(log)}, "failed"),
    }
    for name, (replace, status) in bad.items():
        _store_copy(mixed, GOOD, name, status, replace)
    lines = list(analyze([mixed], tmp_path / "res-mixed", None))
    got = _findings(tmp_path / "res-mixed")

    # the good run's findings: all there, byte for byte what it gives alone
    assert {k: got[k] for k in want} == want
    # each bad run: one n/a finding with the parser's one-line reason and the run's state
    extra = {k: v for k, v in got.items() if k not in want}
    assert len(extra) == len(bad)
    by_run = {v["run"]: v for v in extra.values()}
    assert set(by_run) == set(bad)
    expect = {
        "typo-server": ("sealed-failed", "server.log: cannot tell which engine wrote this server log"),
        "killed-early": ("unsealed", "server.log: cannot tell which engine wrote this server log"),
        "disk-full": ("sealed-failed", "requests.jsonl:"),
        "cut-log": ("sealed-failed", "has no 'total time' line"),
    }
    for name, (state, reason) in expect.items():
        f = by_run[name]
        assert (f["status"], f["reason"], f["run_state"]) == ("n/a", "run_unparseable", state), f
        assert reason in f["detail"] and "\n" not in f["detail"]
        assert f["sources"][0].startswith(f"{name}/")
    assert "last line has no newline" in by_run["disk-full"]["detail"]
    index = _index(tmp_path / "res-mixed")
    assert set(index["unparsed_runs"]) == set(bad) and index["run_states"]["llamacpp"] == "sealed-complete"
    assert sum("not analysed" in line for line in lines) == len(bad)


# ------------------------------------------------------------------- findings carry their run's state


@pytest.mark.parametrize("status", [None, "failed"])
def test_findings_from_an_unsealed_or_failed_run_carry_its_state(tmp_path, status):
    state = "unsealed" if status is None else "sealed-failed"
    raw = tmp_path / "raw"
    _copy(VLLM, raw)
    _store_copy(raw, GOOD, "llamacpp", status)
    lines = list(analyze([raw], tmp_path / "res", None))
    assert f"{CAMPAIGN}/llamacpp: {state}; its findings say so" in lines
    found = _findings(tmp_path / "res")
    # a finding citing a file of the cut run (or naming it) carries its state; one citing only the sealed
    # run's files is sealed-complete
    llama = [
        f
        for f in found.values()
        if f.get("run") == "llamacpp" or any(s.startswith("llamacpp/") for s in f["sources"])
    ]
    vllm = [f for f in found.values() if f["sources"] and all(s.startswith("vllm/") for s in f["sources"])]
    assert len(llama) > 10 and len(vllm) > 10
    assert {f["run_state"] for f in llama} == {state}
    assert {f["run_state"] for f in vllm} == {"sealed-complete"}
    # the peak of the cut sweep (issue #12, item 7): still a number, now with its run's state
    peak = next(f for f in llama if f["metric"] == "peak_output_throughput_tokens_per_s")
    assert peak["status"] == "ok" and peak["run_state"] == state
    # every finding says a state; one citing nothing (an aggregate, an n/a) the worst it may come from
    assert {f["run_state"] for f in found.values()} == {state, "sealed-complete"}
    assert {f["run_state"] for f in found.values() if not f["sources"] and not f.get("engine")} <= {state}
    # tables: the points of that run say so too
    points = (tmp_path / "res" / CAMPAIGN / "tables" / "points.csv").read_text().splitlines()
    header = points[0].split(",")
    col, key = header.index("run_state"), header.index("key")
    rows = [r.split(",") for r in points[1:]]
    assert {r[col] for r in rows if r[key].startswith("llamacpp/")} == {state}
    assert {r[col] for r in rows if r[key].startswith("vllm/")} == {"sealed-complete"}
    assert _index(tmp_path / "res")["run_states"] == {"llamacpp": state, "vllm": "sealed-complete"}


# -------------------------------------------------------------------------------------- verify's states


def test_verify_reports_unsealed_runs_as_neither_ok_nor_broken(tmp_path):
    raw = tmp_path / "raw"
    _copy(GOOD, raw)
    cut = _store_copy(raw, GOOD, "cut", None)
    v = _cli("verify", "--raw", str(raw))
    assert v.exit_code == 0
    assert f"UNSEALED: {cut}: interrupted or still being written" in v.output
    assert v.output.splitlines()[-1].startswith(
        "UNSEALED: 2 runs (1 sealed-complete, 0 sealed-failed, 1 unsealed)"
    )
    # a broken run folder: data but no run.json
    (raw / CAMPAIGN / "stray").mkdir()
    (raw / CAMPAIGN / "stray" / "server.log").write_text("x\n")
    v = _cli("verify", "--raw", str(raw))
    assert v.exit_code == 1
    assert (
        _one_problem(v.output)
        == f"PROBLEM: {raw / CAMPAIGN / 'stray'}: not a run: holds files but no run.json"
    )
    assert v.output.splitlines()[-1].startswith("FAILED: ")


# ------------------------------------------------------------------------ a kill during run creation

_KILLED_CREATE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import collector.raw.store as store

    def stuck(src, dst):  # the kill lands after run.json is complete, before the folder gets its name
        print("staged", flush=True)
        time.sleep(60)

    store.os.rename = stuck
    store.RawStore(Path(sys.argv[1])).create_run("camp", "r1", kind="test")
    """
)


def test_a_kill_between_folder_creation_and_run_json_leaves_nothing_verify_fails_on(tmp_path):
    raw = tmp_path / "raw"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CREATE, str(raw)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "staged"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    left = list((raw / "camp").iterdir())
    assert len(left) == 1 and left[0].name.startswith(f"{TMP_PREFIX}r1.")  # only the staging folder
    assert not (raw / "camp" / "r1").exists() and list(RawStore(raw).iter_runs()) == []
    # an empty folder as the store before issue #12 left it (killed between mkdir and run.json)
    (raw / "camp" / "r0").mkdir()
    v = _cli("verify", "--raw", str(raw))
    assert v.exit_code == 0, v.output
    assert v.output.count("ABANDONED: ") == 2 and "PROBLEM" not in v.output
    assert v.output.splitlines()[-1] == (
        "OK: 0 runs (0 sealed-complete, 0 sealed-failed, 0 unsealed), 2 abandoned folders, 0 files "
        "checked, 0 problems"
    )
    # the name is free: a new run takes it
    run = RawStore(raw).create_run("camp", "r1", kind="test")
    run.seal()
    assert verify(raw).ok and [r.name for r in RawStore(raw).iter_runs()] == ["r1"]


# ---------------------------------------------------------------------------------- seal --recover


def _hashes(run: Path) -> dict[str, str]:
    return {
        p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in run.rglob("*")
        if p.is_file()
    }


def test_seal_recover_finishes_a_run_whose_measuring_ended(tmp_path):
    raw = tmp_path / "raw"
    run = _store_copy(raw, GOOD, "cut", None)  # events.jsonl ends with run_end (status complete)
    before = _hashes(run)
    r = _cli("seal", "--recover", str(run))
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (
        f"{run}: sealed-complete (recovered: "
        f"events.jsonl:{len((run / 'events.jsonl').read_text().splitlines())} shows measuring ended)"
    )
    after = _hashes(run)
    assert {k: after[k] for k in before} == before  # nothing existing changed
    assert set(after) - set(before) == {MANIFEST, SEAL}
    manifest = json.loads((run / MANIFEST).read_text())
    assert manifest["status"] == "complete" and manifest["recovered"]["evidence"].endswith("run_end")
    # what the collector's own seal had written, recounted from the events
    original = json.loads((GOOD / MANIFEST).read_text())
    assert (manifest["points_done"], manifest["checks_failed"]) == (
        original["points_done"],
        original["checks_failed"],
    )
    assert verify(raw).ok and open_run(run).state == "sealed-complete"
    r = _cli("seal", "--recover", str(run))
    assert r.exit_code == 1 and "already sealed" in r.output


def test_seal_recover_refuses_a_run_cut_while_measuring(tmp_path):
    raw = tmp_path / "raw"
    events = (GOOD / "events.jsonl").read_bytes().splitlines(keepends=True)
    cut_at = next(i for i, e in enumerate(events) if b'"kind":"point_end"' in e) + 1
    run = _store_copy(raw, GOOD, "cut", None, {"events.jsonl": b"".join(events[:cut_at])})
    before = _hashes(run)
    r = _cli("seal", "--recover", str(run))
    assert r.exit_code == 1
    assert r.output.count("\n") == 1
    assert (
        f"{run / 'events.jsonl'}:{cut_at}: refusing to seal: the last event is 'point_end', not 'run_end'"
        in r.output
    )
    assert _hashes(run) == before  # nothing written
    # no events at all (a run that is not the collector's): nothing shows measuring ended
    other = RawStore(raw).create_run(CAMPAIGN, "bare", kind="test")
    other.write_text("a.txt", "x\n")
    other.close_unsealed()
    with pytest.raises(StoreError, match="no events.jsonl, so nothing shows measuring ended"):
        recover_seal(other.path)
    # a run whose files changed since they were journaled is never sealed
    done = _store_copy(raw, GOOD, "changed", None)
    _shift_a_digit(done / "requests.jsonl")
    with pytest.raises(StoreError, match="refusing to seal a run that does not verify"):
        recover_seal(done)
    assert not (done / MANIFEST).exists()


_KILLED_SEAL = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import collector.raw.store as store

    src, raw, stop_at = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    run = store.RawStore(raw).create_run("camp", "r", kind="collector-run")
    for rel in ("plan.toml", "requests.jsonl"):
        run.write_bytes(rel, (src / rel).read_bytes())
    ev = run.open_stream("events.jsonl")
    ev.write_line('{"kind":"run_start","mono_ns":1,"unix_ns":1,"v":1}')
    ev.write_line('{"kind":"point_end","mono_ns":2,"unix_ns":2,"v":1,"point":"p0","aborted":null}')
    ev.write_line('{"checks_failed":["kv_pool"],"kind":"run_end","mono_ns":3,"reason":"cut","status":"failed","unix_ns":3,"v":1}')
    real_link = os.link

    def link(a, b):  # the kill lands as the seal writes ``stop_at``
        if Path(b).name == stop_at:
            print("sealing", flush=True)
            time.sleep(60)
        real_link(a, b)

    store.os.link = link
    run.seal("failed", note="cut")
    """
)


@pytest.mark.parametrize("stop_at", [MANIFEST, SEAL])
def test_seal_recover_after_a_kill_inside_the_seal(tmp_path, stop_at):
    raw = tmp_path / "raw"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SEAL, str(GOOD), str(raw), stop_at], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "sealing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    run = raw / "camp" / "r"
    assert not (run / SEAL).exists() and (run / MANIFEST).exists() == (stop_at == SEAL)
    v = _cli("verify", "--raw", str(raw))
    assert v.exit_code == 0 and f"UNSEALED: {run}" in v.output
    r = _cli("seal", "--recover", str(run))
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"{run}: sealed-failed")
    manifest = json.loads((run / MANIFEST).read_text())
    assert manifest["status"] == "failed" and manifest["note"] == "cut"
    if stop_at == MANIFEST:  # written by the recovery from the events
        assert manifest["checks_failed"] == ["kv_pool"] and manifest["points_done"] == 1
    assert set(manifest["files"]) == {"plan.toml", "requests.jsonl", "events.jsonl"}
    report = verify(raw)
    assert report.ok and report.sealed == 1 and report.failed == 1, report.lines()
