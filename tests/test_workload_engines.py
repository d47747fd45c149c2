"""Workloads users have (issue #14 item 4) against the real engines: the chat endpoint, an API key that never
reaches raw/, a ShareGPT-style dataset file, multi-turn conversations and a shared-prefix workload whose
prefix-cache hit rate (analysis.reconcile.capacity.prefix_cache) is above zero with the cache on and zero with
it off.

One llama-server (guarded by an API key) and one vLLM CPU server (prefix caching on, its default) per module;
every run attaches to them, so each engine starts once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from analysis.loading.campaign import load_campaign
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.reconcile.capacity.prefix_cache import point_findings
from collector.protocol import workload as wl
from collector.protocol.run import execute_run
from collector.raw.errors import PlanError
from tests import engine_cache
from tests.engine_cache import OFFLINE_ENV, Server
from tests.loopback import free_port

pytestmark = pytest.mark.engines

KEY_ENV = "ANATOMY_WORKLOAD_TEST_SERVICE"  # a name that does not look secret: the scrub must not rely on it
KEY = "plain-value-4d9e2c"  # nor does the value
DEFAULT_PHASE = "concurrency = 2\nrequests = 4\ninput_len = 24\noutput_len = 8\nseed = 3"


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    p = engine_cache.paths()
    engine_cache.require(p.llama_server, p.tiny_gguf, p.tiny_hf_dir / "tokenizer.json")
    port = free_port()
    # default prompt cache settings (--cache-ram, --slot-prompt-similarity): requests turn reuse on or off
    # with cache_prompt (the plan's prefix_cache)
    cmd = [str(p.llama_server), "-m", str(p.tiny_gguf), "--host", "127.0.0.1", "--port", str(port), "-t", "1",
           "-np", "2", "-c", "4096", "--metrics"]  # fmt: skip
    srv = Server(
        cmd, tmp_path_factory.mktemp("llama") / "server.log", env={**os.environ, "LLAMA_API_KEY": KEY}
    )
    base = f"http://127.0.0.1:{port}"
    try:
        srv.wait_healthy(base, 120)
        yield base
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    p = engine_cache.paths()
    engine_cache.require(p.vllm_python, p.tiny_hf_dir / "config.json")
    port = free_port()
    cmd = [str(p.vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(p.tiny_hf_dir),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
           "--max-model-len", "2048", "--enable-prefix-caching"]  # fmt: skip
    env = {**os.environ, **OFFLINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}
    srv = Server(cmd, tmp_path_factory.mktemp("vllm") / "server.log", env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        srv.wait_healthy(base, 600)
        yield base
    finally:
        srv.stop()


def _plan(tmp: Path, name: str, engine: str, url: str, load: str = "", workload: str = "",
          server: str = "", phase: str = "") -> Path:  # fmt: skip
    p = engine_cache.paths()
    plan = tmp / f"{name}.toml"
    plan.write_text(f"""
campaign = "wl"
run = "{name}"
[server]
engine = "{engine}"
url = "{url}"
served_model_name = "tiny"
{server}
[model]
config = "{p.tiny_config_json}"
gpu = "cpu"
token_id_range = [32, 127]
[sampling]
interval_s = 1.0
[load]
drain_s = 0
request_timeout_s = 120
read_timeout_s = 60
{load}
[workload]
tokenizer = "{p.tiny_hf_dir}"
{workload}
[[phase]]
name = "main"
kind = "concurrency"
{phase or DEFAULT_PHASE}
""")
    return plan


def _hit_rates(raw: Path, run_name: str) -> list[float | None]:
    camp = load_campaign([raw], "wl")
    (run,) = [r for r in camp.all_runs if r.name.startswith(run_name)]
    return [f.value for f in point_findings(run)]


def test_chat_run_on_llamacpp_sends_the_key_and_never_writes_it(tmp_path, llama, monkeypatch) -> None:
    r = httpx.post(f"{llama}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 401  # the server wants the key: a run that completes sent it
    plan = _plan(tmp_path, "chat", "llamacpp", llama, load=f'endpoint = "chat"\napi_key_env = "{KEY_ENV}"\n'
                 'headers = {X-Workload-Test = "1"}')  # fmt: skip
    with pytest.raises(PlanError, match=KEY_ENV):  # no key in the environment: refused before any write
        execute_run(plan, tmp_path / "raw")
    assert not (tmp_path / "raw").exists()
    monkeypatch.setenv(KEY_ENV, KEY)
    res = execute_run(plan, tmp_path / "raw")
    assert res.status == "complete" and not res.checks_failed, str(res)
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    assert len(reqs) == 4 and all(r.ok and r.endpoint == "chat" and r.prompt_format == "text" for r in reqs)
    # text sent: the length is the server's count (the chat template's tokens included)
    assert all(r.input_len == r.prompt_tokens and r.input_len > 24 for r in reqs)
    assert all(r.completion_tokens == sum(r.chunk_tokens) == r.max_tokens == 8 for r in reqs)
    scrapes = (res.path / "scrapes.jsonl").read_text()
    assert "llamacpp:prompt_tokens_total" in scrapes  # /metrics needs the key too
    files = [f for f in res.path.rglob("*") if f.is_file()]
    assert len(files) > 10
    assert [f for f in files if KEY.encode() in f.read_bytes()] == []
    env = json.loads((res.path / "fingerprint" / "environment.json").read_text())
    assert KEY_ENV not in env  # an allow-list: only what changes how the engine runs is recorded


def test_literal_secret_header_is_scrubbed_from_the_plan_copy(tmp_path, llama) -> None:
    secret = "Bearer " + KEY  # the key written into the plan itself, as a header
    plan = _plan(tmp_path, "hdr", "llamacpp", llama, load=f'headers = {{Authorization = "{secret}"}}',
                 phase="concurrency = 1\nrequests = 1\ninput_len = 8\noutput_len = 4\nseed = 1")  # fmt: skip
    res = execute_run(plan, tmp_path / "raw")
    assert res.status == "complete", str(res)
    hits = [f for f in res.path.rglob("*") if f.is_file() and KEY.encode() in f.read_bytes()]
    assert hits == []
    assert "<redacted>" in (res.path / "plan.toml").read_text()


def test_shared_prefix_hit_rate_on_and_off_llamacpp(tmp_path, llama, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    wl = "prefix_len = 96\nnum_prefixes = 2"
    load = f'api_key_env = "{KEY_ENV}"'
    phase = "concurrency = 2\nrequests = 8\ninput_len = 8\noutput_len = 4\nseed = 5"
    rates = {}
    for setting in ("on", "off"):
        plan = _plan(tmp_path, f"prefix-{setting}", "llamacpp", llama, load=load, workload=wl,
                     server=f'prefix_cache = "{setting}"', phase=phase)  # fmt: skip
        res = execute_run(plan, tmp_path / "raw")
        assert res.status == "complete", str(res)
        reqs = parse_requests_jsonl(res.path / "requests.jsonl")
        assert sorted({r.prefix_id for r in reqs}) == [0, 1] and all(r.input_len == 104 for r in reqs)
        assert all(r.prompt_tokens == 104 for r in reqs)
        (rate,) = _hit_rates(tmp_path / "raw", f"prefix-{setting}")
        rates[setting] = rate
    print(f"llama.cpp shared-prefix hit rate: on {rates['on']:.3f}, off {rates['off']:.3f}")
    assert rates["on"] > 0.3 and rates["off"] == 0.0


def test_dataset_multi_turn_chat_on_llamacpp(tmp_path, llama, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    data = tmp_path / "sharegpt.json"
    convs = [{"conversations": [{"from": "human", "value": f"question {i}: what is {i} plus {i}?"},
                                {"from": "gpt", "value": "an answer"}]} for i in range(5)]  # fmt: skip
    data.write_text(json.dumps(convs))
    plan = _plan(tmp_path, "multi", "llamacpp", llama, load=f'endpoint = "chat"\napi_key_env = "{KEY_ENV}"',
                 workload=f'dataset_path = "{data}"\nturns = 2\nturn_delay_ms = 50')  # fmt: skip
    res = execute_run(plan, tmp_path / "raw")
    assert res.status == "complete" and not res.checks_failed, str(res)
    reqs = sorted(parse_requests_jsonl(res.path / "requests.jsonl"), key=lambda r: r.index)
    assert [(r.conversation, r.turn) for r in reqs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for first, second in (reqs[0:2], reqs[2:4]):
        # the second turn carries the first turn's question and the streamed reply: more than both
        assert second.prompt_tokens > first.prompt_tokens + first.completion_tokens
        assert second.send_mono_ns - first.end_mono_ns >= 50_000_000  # the think time


def test_chat_dataset_and_shared_prefix_on_vllm(tmp_path, vllm) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"tell me about the number {i}"}) for i in range(6)))
    res = execute_run(_plan(tmp_path, "vchat", "vllm", vllm, load='endpoint = "chat"',
                            workload="prefix_len = 320\nnum_prefixes = 1", server='prefix_cache = "on"'),
                      tmp_path / "raw")  # fmt: skip
    assert res.status == "complete" and not res.checks_failed, str(res)
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    assert all(r.ok and r.endpoint == "chat" and r.input_len == r.prompt_tokens > 320 for r in reqs)
    assert all(r.completion_tokens == sum(r.chunk_tokens) == 8 for r in reqs)
    (rate,) = _hit_rates(tmp_path / "raw", "vchat")
    print(f"vLLM shared-prefix chat hit rate: {rate:.3f}")
    assert rate > 0.3
    res = execute_run(_plan(tmp_path, "vdata", "vllm", vllm, workload=f'dataset_path = "{data}"',
                            server='prefix_cache = "any"'), tmp_path / "raw")  # fmt: skip
    assert res.status == "complete" and not res.checks_failed, str(res)
    reqs = parse_requests_jsonl(res.path / "requests.jsonl")
    assert len(reqs) == 4 and all(r.ok and r.endpoint is None for r in reqs)
    # the dataset's text was sent, not the point's 24 random ids: the server counted each prompt as the
    # model's tokenizer encodes the file's prompts (8 tokens each)
    tok = wl.load_tokenizer(str(engine_cache.paths().tiny_hf_dir))
    counts = {len(tok.encode(f"tell me about the number {i}") or []) for i in range(6)}
    assert counts == {8} and all(r.input_len == r.prompt_tokens for r in reqs)
    assert {r.prompt_tokens for r in reqs} == counts


def test_dataset_reply_lengths_as_output_lengths_on_llamacpp(tmp_path, llama, monkeypatch) -> None:
    """``output_len = "dataset"``: each request asks for as many tokens as its entry's reply has (vllm bench
    serve's ShareGPT default) and, with ignore_eos, gets exactly that many."""
    monkeypatch.setenv(KEY_ENV, KEY)
    data = tmp_path / "sharegpt.json"
    replies = ["fine", "It is four.", "a much longer reply that goes on " * 3, "yes"]
    convs = [{"conversations": [{"from": "human", "value": f"question {i}"}, {"from": "gpt", "value": r}]}
             for i, r in enumerate(replies)]  # fmt: skip
    data.write_text(json.dumps(convs))
    plan = _plan(tmp_path, "dsout", "llamacpp", llama, load=f'api_key_env = "{KEY_ENV}"',
                 workload=f'dataset_path = "{data}"\noutput_len = "dataset"')  # fmt: skip
    res = execute_run(plan, tmp_path / "raw")
    assert res.status == "complete" and not res.checks_failed, str(res)
    tok = wl.load_tokenizer(str(engine_cache.paths().tiny_hf_dir))
    want = {len(tok.encode(r, special=True) or []) for r in replies}
    reqs = [r for r in parse_requests_jsonl(res.path / "requests.jsonl") if r.phase_kind != "warmup"]
    assert len(reqs) == 4 and {r.max_tokens for r in reqs} <= want and len({r.max_tokens for r in reqs}) > 1
    assert all(r.ok and r.completion_tokens == r.max_tokens for r in reqs)
