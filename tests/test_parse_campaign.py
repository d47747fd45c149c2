"""Every file of the reference campaign parses (or has no parser, by name); inspect reports runs and
failures."""

from __future__ import annotations

import pytest

from analysis.parse import parser_for
from analysis.parse.bench_json import BenchResult
from analysis.parse.fingerprint_txt import Fingerprint
from analysis.parse.llamacpp_log import LlamacppServerLog
from analysis.parse.prometheus import PromSnapshot
from analysis.parse.sampler_csv import SamplerTable
from analysis.parse.sweep_log import SweepLog
from analysis.parse.vllm_log import VllmServerLog
from collector.protocol.importer import import_results
from collector.protocol.inspect import inspect
from collector.raw.store import RawStore
from tests.seed import SEED

pytestmark = pytest.mark.skipif(not SEED.is_dir(), reason="reference campaign not on this machine")

EXPECTED_KIND = {
    ".json": BenchResult,
    "fingerprint.txt": Fingerprint,
    "metrics.log": PromSnapshot,
    "metrics_sweep.csv": SamplerTable,
    "sweep.log": SweepLog,
    "sweep_vllm.log": SweepLog,
    "sweep_llamacpp.log": SweepLog,
    "vllm-server.head.log": VllmServerLog,
    "llamacpp-server.head.log": LlamacppServerLog,
}


def test_every_file_of_the_campaign_parses():
    files = sorted(p for p in SEED.rglob("*") if p.is_file())
    assert len(files) == 72  # as copied here; the README lists what the source has beyond these
    no_parser = []
    for f in files:
        parser = parser_for(f)
        if parser is None:
            no_parser.append(f.name)
            continue
        record = parser(f)  # any ParseError fails the test with file:line
        kind = EXPECTED_KIND[".json" if f.suffix == ".json" else f.name]
        assert isinstance(record, kind), f
    assert no_parser == ["EXCERPTS.tsv"]


def test_registry_table():
    assert parser_for("raw/x/r/server.log").__name__ == "parse_server_log"
    assert (
        parser_for("run.json") is None
        and parser_for("manifest.json") is None
        and parser_for("README.md") is None
    )
    assert parser_for("metrics.csv").__name__ == "parse_sampler_csv"
    assert parser_for("llamacpp-server.log").__name__ == "parse_llamacpp_log"
    assert parser_for("stress.json").__name__ == "parse_result_json"  # vllm bench/AIPerf/GuideLLM: content


def test_server_log_engine_is_told_by_content(tmp_path):
    p = tmp_path / "server.log"
    p.write_bytes((SEED / "Round2/05-perf-test/llamacpp-server.head.log").read_bytes())
    assert isinstance(parser_for(p)(p), LlamacppServerLog)
    p.unlink()
    p.write_bytes((SEED / "Round2/03-perf-test/vllm-server.head.log").read_bytes())
    assert parser_for(p)(p).kv_cache_tokens == 120_064


def test_inspect_summarises_runs_and_reports_a_bad_file_without_stopping(tmp_path):
    raw = tmp_path / "raw"
    list(import_results(SEED, "rtx4090", raw))
    run = RawStore(raw).create_run("broken", "r1", kind="test", meta={"engine": "vllm"})
    run.write_bytes("c001.json", b'{"completed": 4, "duration": ')
    run.write_bytes("metrics.csv", b"ts,running\n1.5,2\n1.6,x\n")
    run.write_bytes("fingerprint.txt", (SEED / "Round1/01-perf-test/fingerprint.txt").read_bytes())
    run.seal()
    out = list(inspect(raw, None))
    text = "\n".join(out)
    assert "rtx4090/round2-01-02-perf-test  [sealed]" in text
    assert "KV pool     120,064 tokens (GPU), 6.41 GiB  (vllm-server.head.log:36)" in text
    assert "max conc.   14.66x at 8,192 tokens/request  (vllm-server.head.log:37)" in text
    assert "results     8 files, 1,363 requests completed, 1 failed" in text  # llama.cpp round 2 (c032)
    assert "KV pool     64 slots x 4,096 = 262,144 tokens" in text
    assert "sampler     969 rows" in text
    assert "FAILED      c001.json:1: not valid JSON" in text
    assert "FAILED      metrics.csv:3: column 'running': 'x' is not a number" in text
    assert "fingerprint NVIDIA GeForce RTX 4090, driver 590.48.01" in text.split("broken/r1")[1]
    only = list(inspect(raw, "broken"))
    assert only[0].startswith("broken/r1  [sealed]") and not any("rtx4090/" in line for line in only)
    assert list(inspect(tmp_path / "empty", None)) == [f"no runs under {tmp_path / 'empty'}"]
