"""Attaching to any OpenAI-compatible server (``[server] engine = "openai"``; refused on main, which knew only
vllm and llamacpp): the run measures it, the checks that need to know the engine are recorded as skipped
(never failed) unless its /metrics names an engine they know, and SGLang (``sglang:*``) and TGI (``tgi_*``)
are recognised by their metric names. Against the fault server posing as SGLang and as a gateway with no
/metrics, and against the real llama-server declared as a generic server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.parse.events_jsonl import checks, parse_events_jsonl
from analysis.parse.requests_jsonl import parse_requests_jsonl
from collector.protocol.checks import check_engine_identity
from collector.protocol.run import execute_run
from collector.raw.errors import PlanError
from collector.raw.plan import load_plan
from collector.raw.store import open_run, verify
from tests import engine_cache
from tests.engine_cache import Server
from tests.loopback import free_port

SGLANG_METRICS = (  # SGLang docs/references/production_metrics.md
    "# TYPE sglang:prompt_tokens_total counter\n"
    'sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0\n'
)
TGI_METRICS = "# TYPE tgi_request_count counter\ntgi_request_count 3\n"  # TGI reference/metrics
LLAMACPP_METRICS = "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n"


def _attach_plan(tmp: Path, url: str, *, config: str = "Qwen2.5-7B-Instruct", extra: str = "") -> Path:
    plan = tmp / "attach.toml"
    plan.write_text(f"""
campaign = "attach"
run = "openai"
[server]
engine = "openai"
url = "{url}"
served_model_name = "fault-model"
{extra}
[model]
config = "{config}"
gpu = "cpu"
token_id_range = [32, 127]
[load]
drain_s = 0
request_timeout_s = 60
read_timeout_s = 30
[[phase]]
name = "sweep"
kind = "concurrency"
input_len = 16
output_len = 8
points = [{{concurrency = 2, requests = 6, seed = 3}}]
""")
    return plan


def _startup_checks(run: Path) -> dict[str, object]:
    return {c.name: c for c in checks(parse_events_jsonl(run / "events.jsonl")) if c.scope == "startup"}


@pytest.mark.parametrize(
    ("names", "seen"),
    [("sglang", "sglang"), ("none", None)],  # SGLang's metric names; a gateway with no /metrics at all
)
def test_an_unknown_openai_server_is_measured_and_its_engine_checks_are_skipped(
    tmp_path, fault_server, names, seen
):
    srv = fault_server(token_ms=1.0, metrics_names=names)
    res = execute_run(_attach_plan(tmp_path, srv.url), tmp_path / "raw")
    assert res.status == "complete" and res.points_done == 1 and not res.checks_failed, str(res)
    run = res.path
    assert open_run(run).sealed and verify(tmp_path / "raw").ok
    reqs = parse_requests_jsonl(run / "requests.jsonl")
    assert len(reqs) == 6 and all(r.ok and r.completion_tokens == 8 for r in reqs)
    found = _startup_checks(run)
    identity = found["engine_identity"]
    assert identity.ok is None and identity.facts == {
        "declared": "openai",
        "metrics_engine": seen,
        "checked_as": None,
    }
    assert found["kv_pool"].ok is None and found["kv_pool"].detail.startswith("skipped")
    assert open_run(run).meta["engine"] == "openai"


def test_engine_identity_from_metric_names():
    for text, seen in ((SGLANG_METRICS, "sglang"), (TGI_METRICS, "tgi"), (LLAMACPP_METRICS, "llamacpp")):
        assert check_engine_identity("openai", text).facts["metrics_engine"] == seen
    # a known engine behind "openai" gets its own checks; a declared engine the metrics contradict fails
    assert check_engine_identity("openai", LLAMACPP_METRICS).facts["checked_as"] == "llamacpp"
    wrong = check_engine_identity("vllm", SGLANG_METRICS)
    assert wrong.ok is False and "declared vLLM; /metrics names SGLang" in wrong.detail
    assert check_engine_identity("llamacpp", LLAMACPP_METRICS).ok is True


def test_openai_engine_only_attaches(tmp_path):
    plan = _attach_plan(tmp_path, "http://127.0.0.1:1")
    plan.write_text(plan.read_text().replace('url = "http://127.0.0.1:1"', 'model = "m.gguf"'))
    with pytest.raises(PlanError) as err:
        load_plan(plan)
    msg = str(err.value)
    assert len(msg.splitlines()) == 1 and 'engine = "openai" attaches to a running server' in msg


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    p = engine_cache.paths()
    engine_cache.require(p.llama_server, p.tiny_gguf)
    port = free_port()
    cmd = [str(p.llama_server), "-m", str(p.tiny_gguf), "--host", "127.0.0.1", "--port", str(port), "-t", "1",
           "-np", "2", "-c", "2048", "--metrics"]  # fmt: skip
    srv = Server(cmd, tmp_path_factory.mktemp("llama") / "server.log")
    base = f"http://127.0.0.1:{port}"
    try:
        srv.wait_healthy(base, 120)
        yield base
    finally:
        srv.stop()


@pytest.mark.engines
def test_real_llama_server_declared_generic_gets_its_llamacpp_checks(tmp_path, llama_server):
    p = engine_cache.paths()
    plan = _attach_plan(tmp_path, llama_server, config=str(p.tiny_config_json), extra='prefix_cache = "any"')
    res = execute_run(plan, tmp_path / "raw")
    assert res.status == "complete" and not res.checks_failed, str(res)
    found = _startup_checks(res.path)
    assert found["engine_identity"].facts["checked_as"] == "llamacpp"  # from its llamacpp:* metrics
    assert found["kv_pool"].ok is True  # read from /props, which an "openai" plan does not ask for by itself
    assert (res.path / "fingerprint" / "server-props.json").is_file()
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    assert len(reqs) == 6 and all(r.ok for r in reqs)
