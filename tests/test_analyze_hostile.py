"""`collector analyze` never crashes on what the collector can write: a run whose server died inside a point
(a point with no completed request: before, a ValueError/TypeError traceback and no results for the whole
campaign); the findings say n/a with the reason, the rest of the campaign and the site are built."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from analysis.pipeline.analyze import analyze
from analysis.report.render import render_site
from collector.protocol.run import execute_run
from collector.raw.errors import AnatomyError, RunError
from collector.raw.store import RawStore, verify
from tests.cli import collector_cli


def _run(tmp: Path, make_plan, raw: Path, *server_args: str) -> None:
    """A `collector run` against the fault server, whose log starts with a llama.cpp line (so analysis reads
    the run as llama.cpp's); the run fails, as the faults make it."""
    plan = make_plan(tmp, server_args=list(server_args))
    fake = tmp / "fake-llama-server"
    fake.write_text(fake.read_text().replace("exec ", "echo 'llama_server: the fault server'\nexec "))
    with pytest.raises(RunError):
        execute_run(plan, raw)


def test_points_without_a_completed_request_give_na_findings_and_a_site(tmp_path, make_plan):
    raw = tmp_path / "raw"
    _run(tmp_path, make_plan, raw, "--die-after", "3")  # the server dies in the first sweep point
    out = tmp_path / "results"
    r = collector_cli("analyze", "--raw", raw, "--out", out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    findings = json.loads((out / "fake" / "findings.json").read_text())
    dead = findings["runs.r.single_stream_p50_itl_ms"]
    assert (dead["status"], dead["reason"]) == ("n/a", "point_cut") and "no ITL" in dead["detail"]
    assert findings["runs.r.prediction.decode_step_ms"]["status"] == "n/a"
    site = render_site(out, tmp_path / "docs")
    assert (tmp_path / "docs" / "campaigns" / "fake" / "concurrency.md").is_file(), site.lines()


REF = Path(__file__).resolve().parent.parent / "raw" / "cpu-tiny-qwen2" / "llamacpp"  # a committed run
HUGE = 2**62


def _hostile_copy(raw: Path) -> Path:
    """The committed llama.cpp run written anew through the store (what the collector would have sealed)
    with what a hostile server makes it record: one request claiming 2^62 tokens in a chunk and in its usage
    (the two agree), and every /metrics scrape body garbage."""
    reqs, scrapes = [], []
    for line in (REF / "requests.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["point"] == "p02-sweep-c002-i128-o64" and r["index"] == 0:
            r["chunk_tokens"][0] = HUGE
            r["usage"]["completion_tokens"] = sum(r["chunk_tokens"])
        reqs.append(json.dumps(r))
    for line in (REF / "scrapes.jsonl").read_text().splitlines():
        s = json.loads(line)
        if s["source"] == "metrics" and s["text"] is not None:
            s["text"] = "<html>502 Bad Gateway</html>\nllamacpp:tokens_predicted_total abc\n"
        scrapes.append(json.dumps(s))
    new = {"requests.jsonl": reqs, "scrapes.jsonl": scrapes}
    info = json.loads((REF / "run.json").read_text())
    run = RawStore(raw).create_run(info["campaign"], "hostile", kind=info["kind"], meta=info["meta"])
    for rel in sorted(json.loads((REF / "manifest.json").read_text())["files"]):
        data = ("\n".join(new[rel]) + "\n").encode() if rel in new else (REF / rel).read_bytes()
        run.write_bytes(rel, data)
    run.seal("complete")
    return run.path


def test_a_2_to_the_62_token_count_garbage_metrics_and_a_bad_file_name_are_not_fatal(tmp_path):
    """Before: MemoryError (the chunk-aware ITL list of 2^62 values); with that fixed, the garbage /metrics
    refused the whole campaign ("not a Prometheus sample"), and a run holding a file name that is not UTF-8
    (an older import took it) crashed analyze (UnicodeEncodeError writing a table)."""
    _hostile_copy(tmp_path / "raw")
    odd = RawStore(tmp_path / "raw").create_run("cpu-tiny-qwen2", "odd-name", kind="imported", meta={})
    odd.write_bytes(os.fsdecode(b"\xff.json"), b"{}")
    odd.seal("complete")
    out = tmp_path / "results"
    r = collector_cli("analyze", "--raw", tmp_path / "raw", "--out", out)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (
        f"odd-name: not analysed (sealed-complete): {odd.path}/\\xff.json: the file name is not UTF-8"
        in r.stdout
    )
    gates = (out / "cpu-tiny-qwen2" / "tables" / "gates.csv").read_text().splitlines()
    flagged = [g for g in gates if "p02-sweep-c002-i128-o64,False,stream_token_counts" in g]
    assert len(flagged) == 1 and ",fail,token_counts_unreliable," in flagged[0]
    assert "claim more tokens than max_tokens" in flagged[0]
    assert json.loads((out / "cpu-tiny-qwen2" / "findings.json").read_text())


def test_out_inside_a_raw_root_is_refused_and_nothing_is_written(tmp_path):
    """Before: the results were written into the sealed run (``--out raw/<campaign>/<run>``) and verify
    failed for ever after."""
    raw = tmp_path / "raw"
    run = raw / REF.parent.name / REF.name
    shutil.copytree(REF, run)
    before = sorted(p.relative_to(raw) for p in raw.rglob("*"))
    r = collector_cli("analyze", "--raw", raw, "--out", run)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        f"Error: --out {run}: inside the raw store {raw}; raw/ is append-only: write the results "
        "elsewhere (e.g. build/results)"
    )
    (tmp_path / "alias").symlink_to(raw)  # another name for the raw root
    for out in (raw, raw / "results", tmp_path / "alias" / "results"):
        with pytest.raises(AnatomyError, match=r"inside the raw store .*; raw/ is append-only"):
            list(analyze([raw], out, None))
    assert sorted(p.relative_to(raw) for p in raw.rglob("*")) == before
    assert verify(raw).ok
