"""`collector import` of what people have: files vllm bench serve, AIPerf and GuideLLM really wrote
(tests/data/peers, see its README), recognised by content, imported byte for byte, read back into points
with the numbers the files hold."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.loading.campaign import iter_points, load_campaign
from collector.raw.store import open_run
from tests.cli import collector_cli
from tests.seed import SEED

PEERS = Path(__file__).parent / "data" / "peers"


def _points(raw: Path, campaign: str) -> list:
    return list(iter_points(load_campaign([raw], campaign)))


def test_aiperf_artifact_folder_becomes_a_point_with_its_numbers(tmp_path):
    src = tmp_path / "my-aiperf-run"
    shutil.copytree(PEERS / "aiperf-0.13.0", src)
    (src / "logs").mkdir()
    (src / "logs" / "aiperf.log").write_text("a log line\n")
    raw = tmp_path / "raw"
    p = collector_cli("import", src, "--campaign", "peers", "--engine", "llamacpp", "--raw", raw)
    assert p.returncode == 0, p.stderr
    assert "peers/my-aiperf-run  llamacpp concurrency_sweep" in p.stdout
    assert "documents" in p.stdout  # logs/ kept, not measured
    (pt,) = _points(raw, "peers")
    doc = json.loads((src / "profile_export_aiperf.json").read_text())
    assert (pt.concurrency, pt.result.completed) == (2, 6)
    assert pt.result.latency["ttft"].median_ms == doc["time_to_first_token"]["p50"]
    assert pt.result.latency["tpot"].percentiles_ms[99.0] == doc["inter_token_latency"]["p99"]
    assert pt.result.output_throughput_tok_s == doc["output_token_throughput"]["avg"]
    assert pt.metric_definition == "aiperf"  # labelled by the tool that wrote it, not vllm-bench-compatible
    run = open_run(raw / "peers" / "my-aiperf-run")
    assert run.meta["engine"] == "llamacpp"
    copied = raw / "peers" / "my-aiperf-run" / "inputs.json"
    assert copied.read_bytes() == (src / "inputs.json").read_bytes()


def test_guidellm_report_gives_a_point_per_benchmark(tmp_path):
    src = tmp_path / "gl"
    shutil.copytree(PEERS / "guidellm-0.8.1", src)
    raw = tmp_path / "raw"
    p = collector_cli("import", src, "--campaign", "peers", "--engine", "vllm", "--raw", raw)
    assert p.returncode == 0 and "peers/gl  vllm concurrency_sweep" in p.stdout, p.stdout + p.stderr
    doc = json.loads((src / "benchmarks.json").read_text())
    pts = sorted(_points(raw, "peers"), key=lambda pt: pt.concurrency)
    assert [(pt.concurrency, pt.result.completed, pt.label) for pt in pts] == [
        (1, 6, "benchmarks-00"),
        (2, 6, "benchmarks-01"),
    ]
    for pt, b in zip(pts, doc["benchmarks"], strict=True):
        ttft = b["metrics"]["time_to_first_token_ms"]["successful"]
        assert pt.result.latency["ttft"].percentiles_ms[99.0] == ttft["percentiles"]["p99"]
        assert pt.result.latency["ttft"].percentiles_ms[99.9] == ttft["percentiles"]["p999"]
        assert pt.result.duration_s == b["duration"]
        assert pt.metric_definition == "guidellm"


@pytest.mark.skipif(not SEED.is_dir(), reason="the reference campaign is not beside the checkout")
def test_vllm_bench_serve_default_names_are_points_not_documents(tmp_path):
    """--save-result files under vllm bench serve's own default names, loose in a folder (no bash names):
    they were filed as documents (0 points) before."""
    src = tmp_path / "results"
    src.mkdir()
    for c in (1, 4):
        f = next(SEED.glob(f"Round2/*/vllm_c{c:03d}.json"))
        d = json.loads(f.read_text())
        name = f"openai-infqps-concurrency{c}-{d['model_id'].split('/')[-1]}-{d['date']}.json"
        shutil.copy(f, src / name)
    raw = tmp_path / "raw"
    p = collector_cli("import", src, "--campaign", "mine", "--raw", raw)
    assert p.returncode == 0, p.stderr
    assert "mine/results  unknown concurrency_sweep" in p.stdout and "pass --engine" in p.stdout
    pts = _points(raw, "mine")
    assert sorted(pt.concurrency for pt in pts) == [1, 4] and all(pt.result.completed for pt in pts)
    assert {pt.metric_definition for pt in pts} == {"vllm-bench-compatible"}


def test_a_folder_with_nothing_known_is_still_refused(tmp_path):
    src = tmp_path / "x" / "sub"
    src.mkdir(parents=True)
    (src / "notes.json").write_text('{"hello": 1}')
    p = collector_cli("import", tmp_path / "x", "--campaign", "c", "--raw", tmp_path / "raw")
    assert p.returncode == 1 and "sub: cannot tell what this test folder holds" in p.stderr
