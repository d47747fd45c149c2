"""The parsers of the collector's own raw files: typed records from real collector output, ParseError with
file:line on every malformed line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.parse.events_jsonl import checks, parse_events_jsonl
from analysis.parse.requests_jsonl import parse_requests_jsonl
from analysis.parse.scrapes_jsonl import counter_total, metric_samples, parse_scrapes_jsonl
from collector.protocol.run import execute_run
from collector.raw.errors import ParseError


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, make_plan) -> Path:
    tmp = tmp_path_factory.mktemp("p")
    return execute_run(make_plan(tmp), tmp / "raw").path


def test_real_files_parse_to_typed_records(run_dir):
    reqs = parse_requests_jsonl(run_dir / "requests.jsonl")
    assert len(reqs) == 17 and all(r.ok and r.done and r.http_status == 200 for r in reqs)
    r = reqs[-1]
    assert r.send_mono_ns < r.chunk_mono_ns[0] <= r.chunk_mono_ns[-1] <= r.end_mono_ns
    assert r.engine_timings["prompt_n"] == r.input_len
    ev = parse_events_jsonl(run_dir / "events.jsonl")
    assert all(a.mono_ns <= b.mono_ns for a, b in zip(ev, ev[1:], strict=False))
    assert {c.name for c in checks(ev)} >= {"health", "completed_vs_sent", "output_tokens", "input_tokens"}
    scr = parse_scrapes_jsonl(run_dir / "scrapes.jsonl")
    tick = next(s for s in scr if s.tag == "tick")
    assert counter_total(metric_samples(tick), "llamacpp:tokens_predicted_total") is not None
    last = [s for s in scr if s.tag == "point_end"][-1]
    # the test server counts every streamed token: the last boundary scrape saw all of them
    assert counter_total(metric_samples(last), "llamacpp:tokens_predicted_total") == sum(
        x.max_tokens for x in reqs
    )


@pytest.mark.parametrize(
    "name, parser, mutate, what",
    [
        (
            "requests.jsonl",
            parse_requests_jsonl,
            lambda o: o.update(send_mono_ns="1"),
            "'send_mono_ns' should be an integer",
        ),
        ("requests.jsonl", parse_requests_jsonl, lambda o: o["chunk_tokens"].append(1), "differ in length"),
        (
            "requests.jsonl",
            parse_requests_jsonl,
            lambda o: o.update(error={"kind": "oops", "message": ""}),
            "known kind",
        ),
        ("requests.jsonl", parse_requests_jsonl, lambda o: o.update(v=2), "unknown record version"),
        ("events.jsonl", parse_events_jsonl, lambda o: o.update(kind="party"), "unknown event kind"),
        ("scrapes.jsonl", parse_scrapes_jsonl, lambda o: o.update(source="dcgm"), "unknown source"),
        ("scrapes.jsonl", parse_scrapes_jsonl, lambda o: o.update(text=3), "'text' should be str"),
    ],
)
def test_bad_line_names_file_and_line(run_dir, tmp_path, name, parser, mutate, what):
    lines = (run_dir / name).read_text().splitlines()
    obj = json.loads(lines[2])
    mutate(obj)
    lines[2] = json.dumps(obj)
    bad = tmp_path / name
    bad.write_text("\n".join(lines) + "\n")
    with pytest.raises(ParseError) as e:
        parser(bad)
    assert str(e.value).startswith(f"{bad}:3: ") and what in str(e.value)


def test_torn_tail_refused_unless_allowed(run_dir, tmp_path):
    data = (run_dir / "requests.jsonl").read_bytes()
    torn = tmp_path / "requests.jsonl"
    torn.write_bytes(data + data[:50])
    with pytest.raises(ParseError, match=r"requests.jsonl:18: last line has no newline"):
        parse_requests_jsonl(torn)
    assert len(parse_requests_jsonl(torn, allow_torn_tail=True)) == 17
    (tmp_path / "x.jsonl").write_text("{not json\n")
    with pytest.raises(ParseError, match=r"x.jsonl:1: not JSON"):
        parse_requests_jsonl(tmp_path / "x.jsonl")
