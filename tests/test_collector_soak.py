"""The collector's memory does not grow with the requests of a run (issue #25; the hour-long soak against CPU
llama.cpp is benchmarks/bench_soak.py): records go to requests.jsonl as they end and are not held for the
point's summary, which reads them back at the point's end."""

from __future__ import annotations

import gc
import io

from rich.console import Console

from analysis.parse.requests_jsonl import parse_requests_jsonl
from collector.protocol import run as run_mod
from collector.protocol.run import execute_run
from collector.raw.records import RequestRecord

REQUESTS = 600


def _live_records() -> int:
    return sum(isinstance(o, RequestRecord) for o in gc.get_objects())


def test_records_are_not_held_while_a_point_runs(tmp_path, make_plan, monkeypatch):
    """600 requests against the fault server: near the point's end, the RequestRecord objects alive are the
    few in flight (main held every one of the point, ~5 KiB each: 150 MB over an hour at 8 req/s), and the
    point's summary still counts all 600."""
    seen: dict[str, int] = {}
    request = run_mod._Live.request

    def counting(self, rec):
        request(self, rec)
        if rec.point.startswith("p01") and self.progress.tasks[-1].completed == REQUESTS - 20:
            seen["alive"] = _live_records()

    monkeypatch.setattr(run_mod._Live, "request", counting)
    points = f"[{{concurrency = 8, requests = {REQUESTS}, seed = 5}}]"
    res = execute_run(
        make_plan(tmp_path, points=points, output_len=4),
        tmp_path / "raw",
        console=Console(file=io.StringIO()),
    )
    assert seen["alive"] < 40, seen
    (row,) = [r for r in res.points if r.point.startswith("p01")]
    assert row.ok == REQUESTS
    recs = parse_requests_jsonl(res.path / "requests.jsonl")
    assert sum(r.point.startswith("p01") for r in recs) == REQUESTS
