"""Plan loading: the shipped plans load; unknown keys and bad values are one-line errors naming file +
field."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.raw.errors import PlanError
from collector.raw.plan import load_plan, parse_plan

ROOT = Path(__file__).resolve().parent.parent
PLAN = """
campaign = "c"
[server]
engine = "llamacpp"
binary = "bin/llama-server"
model = "m.gguf"
port = 9000
args = ["-np", "8"]
[model]
config = "Qwen2.5-7B-Instruct"
gpu = "rtx4090"
token_id_range = [1000, 2000]
[[phase]]
name = "sweep"
kind = "concurrency"
input_len = 128
output_len = 32
points = [{concurrency = 1, requests = 4, seed = 1}, {concurrency = 8, requests = 16, seed = 2}]
[[phase]]
name = "len"
kind = "length"
concurrency = 4
requests = 8
output_len = 16
points = [{input_len = 64, seed = 3}, {input_len = 256, seed = 4}]
"""


def test_points_inherit_phase_defaults_and_get_unique_ids():
    p = parse_plan(PLAN, Path("x.toml"))
    pts = p.points
    assert [(q.concurrency, q.requests, q.input_len, q.output_len, q.seed) for q in pts] == [
        (1, 4, 128, 32, 1), (8, 16, 128, 32, 2), (4, 8, 64, 16, 3), (4, 8, 256, 16, 4)]  # fmt: skip
    assert [q.index for q in pts] == [0, 1, 2, 3]
    assert len({q.point_id for q in pts}) == 4
    assert p.run_name == "x" and p.server.served_model_name == "m"
    assert p.sampling.interval_s == 1.0 and p.load.drain_s == 5.0
    assert pts[0].expect_preemptions == "none"


@pytest.mark.parametrize(
    "edit, where",
    [
        (("port = 9000", "port = 9000\nportt = 1"), "[server].portt: unknown key"),
        (('gpu = "rtx4090"', "gpu = 4090"), "[model].gpu: expected str"),
        (('engine = "llamacpp"', 'engine = "sglang"'), "[server].engine: must be one of vllm, llamacpp"),
        (("[1000, 2000]", "[2000, 1000]"), "[model].token_id_range"),
        (('args = ["-np", "8"]', 'args = ["-np", 8]'), "[server].args: expected a list of strings"),
        (
            ("{concurrency = 1, requests = 4, seed = 1}", "{concurrency = 0, requests = 4, seed = 1}"),
            "[[phase]] #1.points[0].concurrency: must be > 0",
        ),
        (
            ("{input_len = 64, seed = 3}", "{input_len = 64, seed = 3, concurrency = 2}"),
            "[[phase]] #2.points: a length sweep keeps one concurrency",
        ),
        (('binary = "bin/llama-server"\n', ""), "[server].binary: missing"),
        (("input_len = 128\n", ""), "[[phase]] #1.points[0].input_len: missing"),
    ],
)
def test_errors_name_file_and_field(edit, where):
    text = PLAN.replace(*edit, 1)
    assert text != PLAN
    with pytest.raises(PlanError) as e:
        parse_plan(text, Path("plans/bad.toml"))
    msg = str(e.value)
    assert msg.startswith("plans/bad.toml: ") and where in msg and "\n" not in msg


def test_invalid_toml_and_missing_file(tmp_path):
    bad = tmp_path / "b.toml"
    bad.write_text("campaign = \n")
    with pytest.raises(PlanError, match=r"b.toml: not valid TOML"):
        load_plan(bad)
    with pytest.raises(PlanError, match=r"nope.toml: cannot read plan"):
        load_plan(tmp_path / "nope.toml")


def test_attach_needs_served_model_name():
    text = PLAN.replace('binary = "bin/llama-server"\nmodel = "m.gguf"\n', 'url = "http://10.0.0.1:8000"\n')
    with pytest.raises(PlanError, match=r"served_model_name: missing"):
        parse_plan(text, Path("a.toml"))
    p = parse_plan(text.replace("port = 9000", 'port = 9000\nserved_model_name = "q"'), Path("a.toml"))
    assert p.server.attach and p.server.base_url == "http://10.0.0.1:8000"


@pytest.mark.parametrize("plan", sorted((ROOT / "plans").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_plans_load(plan):
    p = load_plan(plan)
    assert p.points, plan
