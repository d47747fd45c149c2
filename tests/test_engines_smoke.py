"""The real engines from the cache (`python -m lab.engines prepare --cache .engines`), serving the tiny
random-weight model: one streamed event per generated token, usage counted, metrics and log lines there.

Skipped when the cache is absent, except under CI (env `CI` set), where a missing engine is a failure.
The cache is <repo>/.engines, or $ENGINES_CACHE.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import gguf
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collector.protocol.sse import SSEDecoder, event_json
from lab.engines import EnginePaths
from tests import engine_cache
from tests.engine_cache import OFFLINE_ENV, Server
from tests.loopback import free_port

pytestmark = pytest.mark.engines

REPO = Path(__file__).resolve().parent.parent
N_TOKENS = 32
# Sent as token ids (mostly merges), the way the collector sends prompts; valid text for both engines.
PROMPT_TEXT = "the model token cache, the server"


_paths = engine_cache.paths
_require = engine_cache.require


def _prompt_ids(paths: EnginePaths) -> list[int]:
    """Encode PROMPT_TEXT greedily with the GGUF's own vocabulary (longest match): ids that exist in both."""
    tokens = gguf.GGUFReader(paths.tiny_gguf).fields["tokenizer.ggml.tokens"].contents()
    index = {t: i for i, t in enumerate(tokens) if not t.startswith(("[PAD", "<|"))}
    text = PROMPT_TEXT.replace(" ", "Ġ")
    ids, i = [], 0
    while i < len(text):
        j = max(j for j in range(i + 1, len(text) + 1) if text[i:j] in index)
        ids.append(index[text[i:j]])
        i = j
    return ids


def _stream(base: str, body: dict) -> list[dict]:
    """POST a streaming completion; every JSON event in order (the [DONE] sentinel must end the stream)."""
    dec = SSEDecoder()
    events: list[dict | None] = []
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for chunk in r.iter_bytes():
            events += [event_json(ev) for ev in dec.feed(chunk)]
    dec.close()
    assert events and events[-1] is None, "stream did not end with [DONE]"
    return [e for e in events if e is not None]


def _check_one_token_per_event(events: list[dict]) -> list[dict]:
    token_events = [e for e in events if e.get("choices") and e["choices"][0].get("text")]
    assert len(token_events) == N_TOKENS
    for e in token_events:
        text = e["choices"][0]["text"]
        # The tiny model's head can only pick a single printable-ASCII byte token: one character = one token.
        assert len(text) == 1 and 0x20 <= ord(text) < 0x7F, text
    usage = [e["usage"] for e in events if e.get("usage")]
    assert usage and usage[-1]["completion_tokens"] == N_TOKENS
    return token_events


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Server]]:
    p = _paths()
    _require(p.llama_server, p.tiny_gguf)
    port = free_port()
    srv = Server(
        [
            str(p.llama_server),
            "-m",
            str(p.tiny_gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-t",
            "1",
            "-np",
            "4",
            "-c",
            "4096",
            "--metrics",
            "--cache-ram",
            "0",
            "--slot-prompt-similarity",
            "0",
        ],
        tmp_path_factory.mktemp("llama") / "server.log",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        srv.wait_healthy(base, 120)
        yield base, srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Server]]:
    p = _paths()
    _require(p.vllm_python, p.tiny_hf_dir / "config.json")
    port = free_port()
    env = {**os.environ, **OFFLINE_ENV, "VLLM_CPU_KVCACHE_SPACE": "1"}
    srv = Server(
        [
            str(p.vllm_python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(p.tiny_hf_dir),
            "--served-model-name",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enforce-eager",
            "--max-model-len",
            "2048",
            "--no-enable-prefix-caching",
        ],
        tmp_path_factory.mktemp("vllm") / "server.log",
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        srv.wait_healthy(base, 600)
        yield base, srv
    finally:
        srv.stop()


def test_llama_server_streams_one_token_per_event(llama: tuple[str, Server]) -> None:
    base, _ = llama
    ids = _prompt_ids(_paths())
    events = _stream(
        base,
        {
            "prompt": ids,
            "max_tokens": N_TOKENS,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    _check_one_token_per_event(events)
    final = events[-1]
    assert final["usage"]["prompt_tokens"] == len(ids)
    assert final["timings"]["predicted_n"] == N_TOKENS


def test_llama_server_reports_the_model(llama: tuple[str, Server]) -> None:
    base, _ = llama
    meta = httpx.get(base + "/v1/models", timeout=10).json()["data"][0]["meta"]
    reader = gguf.GGUFReader(_paths().tiny_gguf)
    assert meta["n_params"] == sum(int(t.n_elements) for t in reader.tensors)
    assert meta["n_vocab"] == len(reader.fields["tokenizer.ggml.tokens"].contents())
    names = {
        s.name
        for fam in text_string_to_metric_families(httpx.get(base + "/metrics", timeout=10).text)
        for s in fam.samples
    }
    assert "llamacpp:tokens_predicted_total" in names


def test_llama_server_tokenizer_round_trip(llama: tuple[str, Server]) -> None:
    base, _ = llama
    ids = httpx.post(base + "/tokenize", json={"content": PROMPT_TEXT}, timeout=10).json()["tokens"]
    assert len(ids) < len(PROMPT_TEXT.encode())  # BPE merges applied, not one token per byte
    text = httpx.post(base + "/detokenize", json={"tokens": ids}, timeout=10).json()["content"]
    assert text == PROMPT_TEXT


def test_llama_quantize_makes_q8_0(tmp_path: Path) -> None:
    p = _paths()
    _require(p.llama_quantize, p.tiny_gguf)
    out = tmp_path / "tiny-q8_0.gguf"
    r = subprocess.run(
        [str(p.llama_quantize), str(p.tiny_gguf), str(out), "Q8_0", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    q = gguf.GGUFReader(out)
    assert q.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0
    types = {t.name: t.tensor_type for t in q.tensors}
    assert types["blk.0.ffn_up.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_vllm_tokenizer_loads_in_the_venv() -> None:
    p = _paths()
    _require(p.vllm_python, p.tiny_hf_dir / "config.json")
    code = (
        "import json, sys\n"
        "from transformers import AutoTokenizer\n"
        f"t = AutoTokenizer.from_pretrained({str(p.tiny_hf_dir)!r})\n"
        f"ids = t.encode({PROMPT_TEXT!r})\n"
        f"greedy = t.decode({_prompt_ids(p)!r})\n"
        "chat = t.apply_chat_template([{'role': 'user', 'content': 'hi'}], tokenize=False,"
        " add_generation_prompt=True)\n"
        "print(json.dumps({'text': t.decode(ids), 'greedy': greedy, 'chat': chat, 'eos': t.eos_token_id}))\n"
    )
    r = subprocess.run(
        [str(p.vllm_python), "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE_ENV},
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["text"] == PROMPT_TEXT  # BPE encode/decode round trip
    assert out["greedy"] == PROMPT_TEXT  # the GGUF's ids mean the same text to the HF tokenizer
    assert out["chat"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert out["eos"] == json.loads((p.tiny_hf_dir / "config.json").read_text())["eos_token_id"]


def test_vllm_streams_every_token_once(vllm: tuple[str, Server]) -> None:
    base, _ = vllm
    ids = _prompt_ids(_paths())
    events = _stream(
        base,
        {
            "model": "tiny",
            "prompt": ids,
            "max_tokens": N_TOKENS,
            "ignore_eos": True,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        },
    )
    # vLLM's API server merges the outputs that queued up for a request since it last sent (its
    # RequestOutputCollector, DELTA mode): under load one event carries several tokens (31 events for 32
    # tokens were seen on a loaded box). What it guarantees: every event carries at least one token, its text
    # is exactly those tokens, and the tokens of all events are the generation, each once.
    token_events = [e for e in events if e.get("choices") and e["choices"][0].get("token_ids")]
    counts = [len(e["choices"][0]["token_ids"]) for e in token_events]
    assert counts and min(counts) >= 1 and sum(counts) == N_TOKENS, counts
    for e, n in zip(token_events, counts, strict=True):
        text = e["choices"][0]["text"]  # the tiny model's tokens are single printable-ASCII characters
        assert len(text) == n and all(0x20 <= ord(c) < 0x7F for c in text), text
    assert events[-1]["usage"]["completion_tokens"] == N_TOKENS
    assert events[-1]["usage"]["prompt_tokens"] == len(ids)


def test_vllm_metrics_and_log(vllm: tuple[str, Server]) -> None:
    base, srv = vllm
    names = {
        s.name
        for fam in text_string_to_metric_families(httpx.get(base + "/metrics", timeout=10).text)
        for s in fam.samples
    }
    assert "vllm:num_preemptions_total" in names
    assert "vllm:kv_cache_usage_perc" in names
    assert any("CPU KV cache size" in line for line in srv.log.read_text(errors="replace").splitlines())
