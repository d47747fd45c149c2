"""collector.protocol.workload's pure parts: the length distributions (seeded, deterministic, within their
bounds),
dataset readers on real files, the byte-level decoder against the model's own tokenizer.json, shared
prefixes, request bodies, the plan settings' refusals and the secret scrub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collector.protocol import fingerprint
from collector.protocol import workload as wl
from collector.raw.errors import PlanError
from collector.raw.plan import parse_plan
from collector.raw.records import RequestRecord
from collector.raw.secrets import scrub, scrub_obj
from tests import engine_cache

TOK_DIR = engine_cache.paths().tiny_hf_dir


@pytest.mark.parametrize("n,length,ratio", [(500, 100, 0.5), (200, 3, 0.9), (50, 1000, 0.01)])
def test_uniform_lengths_are_seeded_and_within_the_range(n, length, ratio) -> None:
    a = wl.uniform_lengths(n, length, ratio, seed=7, stream=1)
    assert a == wl.uniform_lengths(n, length, ratio, seed=7, stream=1)
    assert a != wl.uniform_lengths(n, length, ratio, seed=8, stream=1)
    low, high = max(1, int(length * (1 - ratio))), -(-length * (1 + ratio) // 1)
    assert len(a) == n and min(a) >= low and max(a) <= high
    assert max(a) <= wl.max_length(length, ratio, 0.0)
    if n >= 200 and high - low >= 4:  # both ends of the range are drawn
        assert min(a) <= low + (high - low) * 0.1 and max(a) >= high - (high - low) * 0.1


def test_normal_lengths_are_seeded_clipped_and_centred() -> None:
    a = wl.normal_lengths(2000, 200, 40.0, seed=3, stream=2)
    assert a == wl.normal_lengths(2000, 200, 40.0, seed=3, stream=2)
    low, high = wl.normal_bounds(200, 40.0)
    assert (low, high) == (80, 320) and min(a) >= low and max(a) <= high
    mean = sum(a) / len(a)
    sd = (sum((x - mean) ** 2 for x in a) / len(a)) ** 0.5
    assert abs(mean - 200) < 4 and 35 < sd < 45
    tiny = wl.normal_lengths(500, 2, 10.0, seed=1, stream=2)
    assert min(tiny) >= 1  # never an empty prompt


def test_fixed_and_dispatch() -> None:
    assert wl.lengths(4, 9, 0.0, 0.0, 1, 1) == [9, 9, 9, 9] == wl.fixed_lengths(4, 9)
    assert wl.lengths(50, 9, 0.5, 0.0, 1, 1) == wl.uniform_lengths(50, 9, 0.5, 1, 1)
    assert wl.lengths(50, 9, 0.0, 2.0, 1, 1) == wl.normal_lengths(50, 9, 2.0, 1, 1)


def test_default_prompts_are_the_old_random_ids() -> None:
    ps = wl.build_prompts(wl.WorkloadSpec(), 11, 3, 17, 5, 32, 127)
    assert [p.ids for p in ps] == wl.prompt_token_ids(11, 3, 17, 32, 127)
    assert all(p.input_len == 17 and p.max_tokens == 5 and p.text is None for p in ps)


def test_shared_prefix_prompts() -> None:
    spec = wl.WorkloadSpec(prefix_len=10, num_prefixes=3, input_range_ratio=0.5, output_stddev=2.0)
    ps = wl.build_prompts(spec, 4, 9, 20, 8, 32, 127)
    assert [p.prefix_id for p in ps] == [0, 1, 2] * 3
    heads = {p.prefix_id: p.ids[:10] for p in ps}
    assert len({tuple(h) for h in heads.values()}) == 3
    assert all(p.ids[:10] == heads[p.prefix_id] for p in ps)
    assert all(10 + 10 <= p.input_len <= 10 + 30 == 40 and p.input_len == len(p.ids) for p in ps)
    assert ps == wl.build_prompts(spec, 4, 9, 20, 8, 32, 127)


def test_decoder_matches_the_model_tokenizer() -> None:
    engine_cache.require(TOK_DIR / "tokenizer.json")
    tok = wl.Tokenizer(TOK_DIR)
    text = "the model token cache, the server: ünïcode ✓"
    if tok.can_encode:
        ids = tok.encode(text)
        assert ids is not None and len(ids) < len(text.encode()) and tok.decode(ids) == text
    assert tok.decode(list(range(32, 127))) == "".join(chr(i) for i in range(32, 127))
    assert tok.decode([510, 104, 511]) == "h"  # special tokens dropped
    with pytest.raises(PlanError, match="not in the vocabulary"):
        tok.decode([10**6])


def test_chat_prompts_are_decoded_text(tmp_path) -> None:
    engine_cache.require(TOK_DIR / "tokenizer.json")
    spec = wl.WorkloadSpec(endpoint="chat", tokenizer=TOK_DIR)
    ps = wl.build_prompts(spec, 2, 3, 12, 4, 32, 127)
    ids = wl.prompt_token_ids(2, 3, 12, 32, 127)
    assert [p.text for p in ps] == ["".join(map(chr, i)) for i in ids] and all(p.ids is None for p in ps)
    body = wl.turn_body(spec, "m", ps[1], [("q", "a")], {"cache_prompt": True}, {})
    assert body["messages"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": ps[1].text},
    ]
    assert body["stream_options"] == {"include_usage": True} and body["cache_prompt"] is True
    with pytest.raises(PlanError, match="need"):
        wl.build_prompts(wl.WorkloadSpec(endpoint="chat"), 2, 3, 12, 4, 32, 127)


def test_dataset_readers(tmp_path) -> None:
    share = tmp_path / "s.json"
    share.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "system", "value": "sys"},
                        {"from": "human", "value": "q1"},
                        {"from": "gpt", "value": "a"},
                    ]
                },
                {"conversations": [{"from": "human", "value": "q2"}]},
            ]
        )
    )
    assert wl.read_prompts(share) == ["q1", "q2"]
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"prompt": "a"}\n\n{"text": "b"}\n{"messages": [{"role": "user", "content": "c"}]}\n')
    assert wl.read_prompts(lines) == ["a", "b", "c"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"nothing": 1}\n')
    with pytest.raises(PlanError, match=r"bad.jsonl:2: expected an object"):
        wl.read_prompts(bad)
    with pytest.raises(PlanError, match="unknown dataset format"):
        wl.read_prompts(tmp_path / "x.csv")
    order = wl.dataset_order(5, 3, 7)
    assert order == wl.dataset_order(5, 3, 7) and sorted(order[:3]) == [0, 1, 2] and order[3:6] == order[:3]
    spec = wl.WorkloadSpec(dataset=lines, tokenizer=None)
    ps = wl.build_prompts(spec, 5, 4, 1, 6, 32, 127)
    assert {p.text for p in ps} <= {"a", "b", "c"} and all(p.ids is None and p.max_tokens == 6 for p in ps)


def test_record_fields_and_headers() -> None:
    p = wl.Prompt(None, "x", None, 4, prefix_id=1)
    assert wl.record_fields(wl.WorkloadSpec(endpoint="chat", turns=3), p, 7) == {
        "endpoint": "chat",
        "prompt_format": "text",
        "prefix_id": 1,
        "conversation": 2,
        "turn": 1,
    }
    assert wl.record_fields(wl.WorkloadSpec(), wl.Prompt([1], None, 1, 4), 0) == {}
    assert wl.request_headers("k", {"X-A": "1"}) == {"X-A": "1", "Authorization": "Bearer k"}
    with pytest.raises(PlanError, match="MY_KEY is not set"):
        wl.api_key("MY_KEY", {})
    assert wl.api_key("MY_KEY", {"MY_KEY": "v"}) == "v" and wl.api_key(None, {}) is None


def test_new_record_fields_round_trip_and_old_records_parse() -> None:
    base = {
        "v": 1,
        "request_id": "r",
        "phase": "p",
        "phase_kind": "concurrency",
        "point": "pt",
        "point_index": 0,
        "index": 0,
        "worker": 0,
        "concurrency": 1,
        "seed": 0,
        "input_len": 5,
        "max_tokens": 2,
        "send_mono_ns": 1,
        "send_unix_ns": 1,
        "end_mono_ns": 2,
        "end_unix_ns": 2,
        "chunk_mono_ns": [],
        "chunk_unix_ns": [],
        "chunk_tokens": [],
        "done": True,
    }
    old = RequestRecord.from_obj(base)
    assert old.endpoint is None and "endpoint" not in old.to_obj()
    new = RequestRecord.from_obj(
        {**base, "endpoint": "chat", "prompt_format": "text", "prefix_id": 2, "turn": 1, "conversation": 0}
    )
    assert RequestRecord.from_obj(new.to_obj()) == new and new.prefix_id == 2
    with pytest.raises(Exception, match="prefix_id"):
        RequestRecord.from_obj({**base, "prefix_id": "2"})


PLAN = """
campaign = "c"
[server]
engine = "llamacpp"
url = "http://127.0.0.1:1"
served_model_name = "m"
{server}
[model]
config = "Qwen2.5-7B-Instruct"
gpu = "cpu"
token_id_range = [32, 127]
[load]
{load}
[workload]
{workload}
[[phase]]
name = "a"
kind = "concurrency"
concurrency = 2
requests = 4
input_len = 8
output_len = 4
seed = 1
"""


def _parse(server: str = "", load: str = "", workload: str = ""):
    return parse_plan(PLAN.format(server=server, load=load, workload=workload), Path("t.toml"))


def test_plan_settings_and_refusals() -> None:
    p = _parse(
        'prefix_cache = "on"',
        'endpoint = "chat"\napi_key_env = "K"\nheaders = {X-A = "1"}',
        "prefix_len = 4\nnum_prefixes = 2\nturns = 2\nturn_delay_ms = 10\noutput_stddev = 1.5",
    )
    assert p.server.prefix_cache == "on" and p.load.endpoint == "chat" and p.load.headers == {"X-A": "1"}
    assert p.workload.turns == 2 and p.workload.output_stddev == 1.5 and _parse().server.prefix_cache == "off"
    for kw, msg in [
        ({"server": 'prefix_cache = "maybe"'}, "prefix_cache: must be one of off, on, any"),
        ({"load": 'endpoint = "embeddings"'}, "endpoint: must be one of completions, chat"),
        ({"load": 'api_key_env = "sk-123 456"'}, "the NAME of an environment variable"),
        ({"workload": "input_range_ratio = 1.0"}, r"input_range_ratio: must be in \[0, 1\)"),
        ({"workload": "output_range_ratio = 0.2\noutput_stddev = 3"}, "not both"),
        ({"workload": "turns = 3"}, "turns: 3 turns per conversation, but point .* has 4 requests"),
        ({"workload": "prefix_lenn = 3"}, "unknown key"),
    ]:
        with pytest.raises(PlanError, match=msg):
            _parse(**kw)


def test_secret_scrub() -> None:
    secrets = fingerprint.plan_secrets("k3y-value", {"Authorization": "Bearer tok-abcdef", "X-Trace": "on"})
    assert "k3y-value" in secrets and "tok-abcdef" in secrets and "on" not in secrets
    text = 'api = "k3y-value"\nAuthorization = "Bearer tok-abcdef"\nX-Trace = "on"'
    out = scrub(text, secrets)
    assert "k3y-value" not in out and "tok-abcdef" not in out and 'X-Trace = "on"' in out
    assert scrub_obj({"a": ["Bearer tok-abcdef", 3]}, secrets) == {"a": ["<redacted>", 3]}
