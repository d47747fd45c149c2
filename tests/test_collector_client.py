"""The streaming client and the closed-loop load against a local test server: every outcome is a record.

The fault server (tests/fault_server.py) stands in for faults a real engine cannot be made to produce on
demand; normal streaming is tested against real engines in test_collector_engines.py.
"""

from __future__ import annotations

import asyncio
import json
import ssl

import httpx
import pytest

from collector.protocol.client import build_request, stream_completion, worker_client
from collector.protocol.loadgen import Abort, Listeners, LoadSettings, run_point
from collector.protocol.workload import completion_body, prompt_token_ids
from collector.raw.plan import TRANSPORTS, PointPlan
from collector.raw.records import RequestRecord
from tests.fault_server import FaultServer
from tests.loopback import free_port

# The identity fields a record carries (loadgen fills them per request).
META = {
    "request_id": "r",
    "phase": "t",
    "phase_kind": "concurrency",
    "point": "p",
    "point_index": 0,
    "index": 0,
    "worker": 0,
    "concurrency": 1,
    "seed": 0,
    "input_len": 5,
    "max_tokens": 6,
}


def _one(
    server: FaultServer,
    max_tokens=6,
    extra=None,
    request_timeout_s=10.0,
    read_timeout_s=5.0,
    prompt_len=5,
    transport="httpcore",
):
    """One request through a load worker's client over ``transport`` ([load] transport)."""

    async def go():
        body = completion_body("m", list(range(40, 40 + prompt_len)), max_tokens, extra or {}, {})
        timeout = httpx.Timeout(5.0, read=read_timeout_s)
        async with worker_client(transport, timeout, ssl.create_default_context()) as c:
            request = build_request(c, f"{server.url}/v1/completions", body)
            return await stream_completion(c, request, META, request_timeout_s=request_timeout_s)

    return asyncio.run(go())


# every fault is recorded alike whichever HTTP transport the load client runs on
@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


@pytest.fixture
def server(fault_server):
    return fault_server(token_ms=1.0)


@pytest.mark.parametrize(
    "extra, source",
    [
        ({"stream_options": {"continuous_usage_stats": True}}, "usage"),
        ({"timings_per_token": True}, "timings"),
        ({}, "events"),
    ],
)
def test_normal_stream_is_recorded_chunk_by_chunk(server, extra, source, transport):
    rec = _one(server, max_tokens=6, extra=extra, transport=transport)
    assert rec.error_kind is None and rec.done and rec.http_status == 200
    assert rec.chunk_tokens == (1,) * 6 and rec.token_count_source == source
    assert len(rec.chunk_mono_ns) == len(rec.chunk_unix_ns) == 6
    assert rec.send_mono_ns <= rec.headers_mono_ns <= rec.chunk_mono_ns[0]
    assert list(rec.chunk_mono_ns) == sorted(rec.chunk_mono_ns) and rec.chunk_mono_ns[-1] <= rec.end_mono_ns
    assert rec.usage == {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11}
    assert rec.finish_reason == "length" and rec.response_id == "cmpl-1"
    # what the collector writes is what analysis reads back, field for field
    line = json.loads(json.dumps(rec.to_obj(), sort_keys=True))
    assert RequestRecord.from_obj(line, "requests.jsonl", 1) == rec


@pytest.mark.parametrize(
    "fault, kind, status, chunks",
    [
        ("cut", "stream_cut", 200, 4),
        ("http500", "http", 500, 0),
        ("http429", "http", 429, 0),
        ("malformed", "protocol", 200, 1),
    ],
)
def test_faults_become_error_records_with_what_arrived(fault, kind, status, chunks, fault_server, transport):
    s = fault_server(token_ms=1.0, faults={fault: 1})
    rec = _one(s, max_tokens=8, transport=transport)
    assert rec.error_kind == kind, rec.error_message
    assert rec.http_status == status and not rec.done
    assert len(rec.chunk_mono_ns) == chunks
    if kind == "http":
        assert f"HTTP {status}" in rec.error_message and "injected" in rec.error_message
    assert RequestRecord.from_obj(rec.to_obj()) == rec


def test_slow_first_byte_hits_the_read_timeout(fault_server, transport):
    s = fault_server(token_ms=1.0, faults={"slow": 1}, slow_s=3.0)
    rec = _one(s, read_timeout_s=0.3, transport=transport)
    assert rec.error_kind == "timeout" and rec.chunk_mono_ns == () and rec.http_status == 200


def test_hanging_stream_hits_the_request_timeout(fault_server, transport):
    s = fault_server(token_ms=1.0, faults={"hang": 1})
    rec = _one(s, request_timeout_s=0.5, read_timeout_s=30, transport=transport)
    assert rec.error_kind == "timeout" and "request_timeout_s" in rec.error_message


def test_connection_refused(transport):
    s = FaultServer()
    s.port = free_port()
    rec = _one(s, transport=transport)
    assert rec.error_kind == "connect" and rec.http_status is None


def test_cancelled_request_leaves_its_partial_record(server):
    seen: list[RequestRecord] = []
    chunks: list[int] = []

    async def go():
        body = completion_body("m", [50] * 4, 2000, {}, {})
        task = None

        def on_chunk(n: int) -> None:
            chunks.append(n)
            if len(chunks) == 3:
                task.cancel()

        async with httpx.AsyncClient() as c:
            request = build_request(c, f"{server.url}/v1/completions", body)
            meta = {**META, "_sink": seen.append}
            task = asyncio.create_task(
                stream_completion(c, request, meta, request_timeout_s=30, on_chunk=on_chunk)
            )
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
    (rec,) = seen
    assert rec.error_kind == "aborted" and len(rec.chunk_mono_ns) == 3 and rec.request_id == "r"


def test_prompts_are_seeded_exact_length_and_in_range():
    a = prompt_token_ids(7, 5, 33, 32, 127)
    assert a == prompt_token_ids(7, 5, 33, 32, 127) and a != prompt_token_ids(8, 5, 33, 32, 127)
    assert all(len(p) == 33 and all(32 <= t < 127 for t in p) for p in a)
    assert len({tuple(p) for p in a}) == 5


def test_engine_and_plan_extras_merge_into_the_body():
    b = completion_body("m", [1], 3, {"stream_options": {"continuous_usage_stats": True}}, {"top_k": 1})
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b["temperature"] == 0.0 and b["ignore_eos"] is True and b["stream"] is True and b["top_k"] == 1


def _point(concurrency, requests, output_len=5):
    return PointPlan(phase="t", kind="concurrency", index=0, concurrency=concurrency, requests=requests,
                     input_len=9, output_len=output_len, seed=3, expect_preemptions="none")  # fmt: skip


def test_closed_loop_keeps_concurrency_and_records_every_request(server):
    recs = []

    async def go():
        return await run_point(
            _point(3, 10),
            LoadSettings(server.url, "m", (32, 127), {}, {}, request_timeout_s=10, read_timeout_s=5),
            Listeners(sink=recs.append),
            Abort(),
        )

    out = asyncio.run(go())
    assert out.sent == out.finished == out.ok == 10 and not out.errors and out.aborted is None
    assert sorted(r.index for r in recs) == list(range(10))
    assert server.max_running == 3 and server.connections == 3  # kept alive: one connection per worker
    assert {r.worker for r in recs} == {0, 1, 2}
    assert all(r.usage["prompt_tokens"] == 9 for r in recs)


def test_abort_stops_sending_and_records_in_flight_requests(server):
    recs = []

    async def go():
        abort = Abort()
        asyncio.get_running_loop().call_later(0.3, abort.set, "test abort")
        return await run_point(
            _point(2, 50, output_len=400),
            LoadSettings(server.url, "m", (32, 127), {}, {}, request_timeout_s=30, read_timeout_s=5),
            Listeners(sink=recs.append),
            abort,
        )

    out = asyncio.run(go())
    assert out.aborted == "test abort" and out.sent < 50
    assert out.finished == out.sent == len(recs)
    assert out.errors["aborted"] == 2 and all(r.error_kind == "aborted" for r in recs if r.error_kind)


def test_unreachable_server_aborts_the_point():
    s = FaultServer()
    s.port = free_port()
    recs = []

    async def go():
        return await run_point(
            _point(2, 40),
            LoadSettings(s.url, "m", (32, 127), {}, {}, request_timeout_s=5, read_timeout_s=5),
            Listeners(sink=recs.append),
            Abort(),
        )

    out = asyncio.run(go())
    assert out.aborted.startswith("server unreachable") and out.errors["connect"] == len(recs) < 40


# llama-server's stream (build 0c1e57098) as it arrives, shortened: per-token events with cumulative timings,
# then a last event with empty text, finish_reason, usage AND timings, then [DONE].
LLAMA_STREAM = b"".join(
    b"data: " + json.dumps(ev).encode() + b"\n\n"
    for ev in [
        {"choices": [{"text": "$", "index": 0, "finish_reason": None}], "id": "c1",
         "timings": {"cache_n": 0, "prompt_n": 8, "predicted_n": 1}},
        {"choices": [{"text": "$", "index": 0, "finish_reason": None}], "id": "c1",
         "timings": {"cache_n": 0, "prompt_n": 8, "predicted_n": 2}},
        {"choices": [{"text": "$", "index": 0, "finish_reason": None}], "id": "c1",
         "timings": {"cache_n": 0, "prompt_n": 8, "predicted_n": 3}},
        {"choices": [{"text": "", "index": 0, "finish_reason": "length"}], "id": "c1",
         "usage": {"completion_tokens": 3, "prompt_tokens": 8, "total_tokens": 11},
         "timings": {"cache_n": 0, "prompt_n": 8, "predicted_n": 3, "predicted_ms": 1.0}},
    ]
) + b"data: [DONE]\n\n"  # fmt: skip


class _Pieces(httpx.AsyncByteStream):
    def __init__(self, data: bytes, size: int):
        self.pieces = [data[i : i + size] for i in range(0, len(data), size)]

    async def __aiter__(self):
        for p in self.pieces:
            yield p


def test_llamacpp_last_event_is_not_counted_twice():
    transport = httpx.MockTransport(lambda req: httpx.Response(200, stream=_Pieces(LLAMA_STREAM, 37)))

    async def go():
        async with httpx.AsyncClient(transport=transport) as c:
            request = build_request(c, "http://x/v1/completions", {})
            return await stream_completion(c, request, META, request_timeout_s=5)

    rec = asyncio.run(go())
    assert rec.error_kind is None and rec.token_count_source == "timings"
    assert rec.chunk_tokens == (1, 1, 1, 0) and rec.usage["completion_tokens"] == 3
    assert rec.engine_timings["predicted_ms"] == 1.0 and rec.finish_reason == "length"
