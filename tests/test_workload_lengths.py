"""Request lengths a workload can draw: dataset replies as output lengths (vllm bench serve's ShareGPT
default, checked against vLLM's own tokenizer count), and pre-flight's check of the longest request a plan
can draw (prefix + length distributions, dataset prompts and replies, multi-turn growth) against the
context, one line naming the plan file and the phase."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from collector.protocol import workload as wl
from collector.protocol.preflight import Preflight, PreflightError, check_lengths
from collector.raw.errors import PlanError
from collector.raw.plan import load_plan, parse_plan
from tests import engine_cache

TOK_DIR = engine_cache.paths().tiny_hf_dir

REPLIES = ["ok", "Two plus two is four, as every schoolbook says.", "A longer reply " * 9, "yes, indeed"]


def _sharegpt(tmp: Path) -> Path:
    """A small ShareGPT file: four conversations with replies of different lengths, one without a reply."""
    convs = [
        {
            "id": f"c{i}",
            "conversations": [{"from": "human", "value": f"question {i}?"}, {"from": "gpt", "value": r}],
        }
        for i, r in enumerate(REPLIES)
    ]
    convs.insert(2, {"id": "lonely", "conversations": [{"from": "human", "value": "no one answers"}]})
    p = tmp / "sharegpt.json"
    p.write_text(json.dumps(convs))
    return p


def test_dataset_entries_and_their_replies(tmp_path: Path) -> None:
    share = _sharegpt(tmp_path)
    entries = wl.read_entries(share)
    assert [e.reply for e in entries] == [REPLIES[0], REPLIES[1], None, REPLIES[2], REPLIES[3]]
    assert [e.prompt for e in wl.read_entries(share, need_reply=True)] == [f"question {i}?" for i in range(4)]
    lines = tmp_path / "d.jsonl"
    lines.write_text(
        json.dumps({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]})
        + "\n"
        + json.dumps({"prompt": "p", "completion": "c"})
        + "\n"
        + json.dumps({"text": "t"})
    )
    assert [(e.prompt, e.reply) for e in wl.read_entries(lines)] == [("u", "a"), ("p", "c"), ("t", None)]
    only = tmp_path / "only.jsonl"
    only.write_text(json.dumps({"text": "t"}))
    with pytest.raises(PlanError, match=r"only.jsonl: no entries with a prompt and a reply"):
        wl.read_entries(only, need_reply=True)


def _vllm_counts(texts: list[str]) -> list[int]:
    """Token counts as vllm bench serve's ShareGPT dataset takes them: len(tokenizer(text).input_ids) with
    transformers' AutoTokenizer, in the vLLM environment."""
    py = engine_cache.paths().vllm_python
    engine_cache.require(py, TOK_DIR / "tokenizer.json")
    code = (
        "import json, sys; from transformers import AutoTokenizer; "
        f"t = AutoTokenizer.from_pretrained({str(TOK_DIR)!r}); "
        "print(json.dumps([len(t(x).input_ids) for x in json.loads(sys.stdin.read())]))"
    )
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([str(py), "-c", code], input=json.dumps(texts), capture_output=True, text=True,
                       timeout=300, env=env, check=True)  # fmt: skip
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_dataset_output_lengths_are_the_replies_token_counts(tmp_path: Path) -> None:
    engine_cache.require(TOK_DIR / "tokenizer.json")
    spec = wl.WorkloadSpec(dataset=_sharegpt(tmp_path), tokenizer=TOK_DIR, output_from_dataset=True)
    prompts = wl.build_prompts(spec, 7, 8, 1, 999, 32, 127)  # the point's output_len 999 is not used
    expected = dict(zip(REPLIES, _vllm_counts(REPLIES), strict=True))
    assert len(set(expected.values())) == 4  # the fixture's replies differ in length
    entries = wl.read_entries(spec.dataset, need_reply=True)
    order = wl.dataset_order(7, len(entries), 8)
    assert [p.max_tokens for p in prompts] == [expected[entries[k].reply] for k in order]
    assert wl.dataset_max_lengths(spec)[1] == max(expected.values())
    # without the option the plan's output length is kept, and the reply-less entry is drawn too
    plain = wl.build_prompts(wl.WorkloadSpec(dataset=spec.dataset, tokenizer=TOK_DIR), 7, 8, 1, 9, 32, 127)
    assert {p.max_tokens for p in plain} == {9} and len(wl.read_prompts(spec.dataset)) == 5


PLAN = """
campaign = "c"
[server]
engine = "vllm"
url = "http://127.0.0.1:1"
served_model_name = "m"
[model]
config = "Qwen2.5-7B-Instruct"
gpu = "cpu"
max_model_len = {ctx}
token_id_range = [32, 127]
[workload]
{workload}
[[phase]]
name = "sweep"
kind = "concurrency"
input_len = 24
output_len = 16
points = [{{concurrency = 1, requests = 4, seed = 1}}]
"""


@pytest.mark.parametrize(
    "workload, msg",
    [
        ('output_len = "dataset"', r"\[workload\].*output_len.*it needs a dataset_path"),
        (
            'dataset_path = "d.json"\noutput_len = "dataset"\noutput_stddev = 2',
            r"output_len.*no output distribution beside them",
        ),
        (
            'dataset_path = "d.json"\ntokenizer = "none"\noutput_len = "dataset"',
            r"output_len.*needs a tokenizer",
        ),
        ('output_len = "replies"', r"output_len: must be one of plan, dataset"),
    ],
)
def test_plan_refuses_dataset_output_lengths_without_their_means(workload: str, msg: str) -> None:
    with pytest.raises(PlanError, match=msg):
        parse_plan(PLAN.format(ctx=64, workload=workload), Path("p.toml"))


def _lengths(tmp_path: Path, ctx: int, workload: str) -> Preflight:
    f = tmp_path / "plan.toml"
    f.write_text(PLAN.format(ctx=ctx, workload=workload))
    pf = Preflight()
    check_lengths(load_plan(f), pf)
    return pf


@pytest.mark.parametrize(
    "workload, longest, how",
    [
        ("", 40, r"input_len 24 \+ output_len 16"),
        (
            "input_range_ratio = 0.5",
            52,
            r"input up to 36 \(input_len 24, input_range_ratio 0.5\) \+ output_len 16",
        ),
        (
            "prefix_len = 8\noutput_stddev = 2",
            8 + 24 + 22,
            r"prefix_len 8 \+ input_len 24 \+ output up to 22 \(output_len 16, output_stddev 2\)",
        ),
        ("turns = 2", 80, r"2 turns x \(input_len 24 \+ output_len 16\)"),
    ],
)
def test_preflight_checks_the_longest_request_a_plan_can_draw(tmp_path, workload, longest, how) -> None:
    assert _lengths(tmp_path, longest, workload).context_tokens == longest  # exactly fits: accepted
    with pytest.raises(PreflightError) as err:
        _lengths(tmp_path, longest - 1, workload)
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{tmp_path / 'plan.toml'}: [[phase]] 'sweep', point ")
    pattern = (
        rf"{how} = {longest} tokens exceeds the {longest - 1} a request may hold \(\[model\].max_model_len\)"
    )
    assert re.search(pattern, line), line


def test_preflight_checks_a_datasets_longest_prompt_and_reply(tmp_path: Path) -> None:
    engine_cache.require(TOK_DIR / "tokenizer.json")
    data = _sharegpt(tmp_path)
    tok = wl.load_tokenizer(str(TOK_DIR))
    entries = wl.read_entries(data, need_reply=True)
    prompt = max(len(tok.encode(e.prompt) or []) for e in entries)
    reply = max(len(tok.encode(e.reply or "", special=True) or []) for e in entries)
    w = f'dataset_path = "{data}"\ntokenizer = "{TOK_DIR}"\noutput_len = "dataset"\nprefix_len = 4'
    longest = 4 + prompt + reply
    assert _lengths(tmp_path, longest, w).context_tokens == longest
    with pytest.raises(PreflightError, match=rf"prefix_len 4 \+ the dataset's longest prompt {prompt} \+ "
                       rf"the dataset's longest reply {reply} = {longest} tokens exceeds"):  # fmt: skip
        _lengths(tmp_path, longest - 1, w)
