"""One streaming ``/v1/completions`` request → one request record (observations only, no statistics).

A record is one line of ``requests.jsonl`` (``collector.raw.records.RequestRecord``). It keeps the send
time, and for every streamed chunk that carries ``choices`` its receive time on both clocks and how many
tokens it carried; the final usage, finish reason, the engine's own timings (llama.cpp), the HTTP status and,
if the request did not end with ``[DONE]``, what went wrong. Every outcome, including cancellation, produces a
record: a request that was sent is never silently dropped.

Tokens per chunk, from the first source the stream's first chunk offers, kept for the whole stream:
``choices[0].token_ids`` (its length); the cumulative ``usage.completion_tokens`` (vLLM
``continuous_usage_stats``); the cumulative ``timings.predicted_n`` (llama.cpp ``timings_per_token``);
otherwise ("events") 1 per chunk with non-empty text. Cumulative counts are differenced chunk to chunk.
A count no real stream gives (a chunk of fewer than 0 or more than ``max_tokens`` tokens: a cumulative
counter that went back, or 2^62) is recorded clipped into that range, and the record says what the server
sent (``token_count_problem``): analysis then distrusts the request's counts.

A chunk whose shape is not a streamed completion (``{"choices": [null]}``, ``{"choices": "abc"}``, a
non-string finish reason) ends that request as a ``protocol`` error, recorded like any other; the run goes
on.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from collector.protocol.aiohttp_transport import AiohttpTransport
from collector.protocol.clock import SYSTEM_CLOCK, Clock, Stamp, stamp
from collector.protocol.sse import SSEDecoder, SSEError, SSEServerError, payload_json
from collector.raw.records import RequestRecord

_ERROR_BODY_BYTES = 2000
# A kept-alive connection the server closed just as the request went out fails before any response byte
# (llama-server's HTTP library closes connections after a few requests). Such a request never reached the
# server's handler, so it is sent again, once, on a fresh connection; the record counts it (``retries``).
_RETRY_BEFORE_RESPONSE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class _TokenCounter:
    """Tokens carried by each chunk. The first source a stream offers is kept for the whole stream
    (llama.cpp's last chunk adds a cumulative ``usage`` next to its ``timings``: switching source there would
    count the whole output again)."""

    ORDER = ("token_ids", "usage", "timings")

    def __init__(self, max_tokens: int) -> None:
        self.source: str | None = None
        self.problem: str | None = None  # the first count out of range, as the server sent it
        self._bound = max(max_tokens, 1)
        self._chunks = 0
        self._prev: dict[str, int] = {"usage": 0, "timings": 0}

    @staticmethod
    def _offers(obj: dict[str, Any], choice: dict[str, Any]) -> dict[str, int]:
        out = {}
        if isinstance(choice.get("token_ids"), list):
            out["token_ids"] = len(choice["token_ids"])
        usage, timings = obj.get("usage"), obj.get("timings")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            out["usage"] = usage["completion_tokens"]
        if isinstance(timings, dict) and isinstance(timings.get("predicted_n"), int):
            out["timings"] = timings["predicted_n"]
        return out

    def count(self, obj: dict[str, Any], choice: dict[str, Any]) -> int:
        """Tokens this chunk carried, within 0..max_tokens (see ``problem`` for one that was not)."""
        self._chunks += 1
        n = self._raw_count(obj, choice)
        if 0 <= n <= self._bound:
            return n
        if self.problem is None:
            what = "a cumulative count that went back" if n < 0 else f"more than max_tokens={self._bound}"
            self.problem = f"chunk {self._chunks}: {self.source} gave {n} tokens ({what})"[:300]
        return min(max(n, 0), self._bound)

    def _raw_count(self, obj: dict[str, Any], choice: dict[str, Any]) -> int:
        offers = self._offers(obj, choice)
        if self.source is None:
            self.source = next((s for s in self.ORDER if s in offers), "events")
        if self.source == "events":
            # no count on the wire: one token per chunk that carries text (approximate; recorded as such)
            return 1 if choice_text(choice) else 0
        if self.source not in offers:
            self.source = "mixed"  # analysis must not trust these counts
            return 0
        if self.source == "token_ids":
            return offers["token_ids"]
        n = offers[self.source] - self._prev[self.source]
        self._prev[self.source] = offers[self.source]
        return n


def first_choice(obj: dict[str, Any]) -> dict[str, Any] | None:
    """A chunk's ``choices[0]``; None for a chunk without choices (a usage chunk); SSEError for choices that
    are not a list of objects, or a finish reason that is not a string."""
    choices = obj.get("choices")
    if choices is None or choices == []:
        return None
    if choices.__class__ is not list or choices[0].__class__ is not dict:
        raise SSEError(
            f"malformed chunk: choices is {orjson.dumps(choices)[:120].decode('utf-8', 'replace')}"
        )
    finish = choices[0].get("finish_reason")
    if finish is not None and finish.__class__ is not str:
        raise SSEError(f"malformed chunk: finish_reason is {orjson.dumps(finish)[:120].decode()}")
    return choices[0]


def choice_text(choice: dict[str, Any]) -> str | None:
    """The text a streamed choice carries: ``text`` (completions) or ``delta.content`` (chat)."""
    text = choice.get("text")
    if text is None:
        delta = choice.get("delta")
        text = delta.get("content") if delta.__class__ is dict else None
    return text if text.__class__ is str else None


def _error(kind: str, err: BaseException | str) -> tuple[str, str]:
    """(error kind, message) of a request that did not end with ``[DONE]``."""
    msg = (
        err if isinstance(err, str) else (f"{type(err).__name__}: {err}" if str(err) else type(err).__name__)
    )
    return kind, msg[:1000]


class _Received:
    """What a streamed response has delivered so far: the chunks' times and token counts, and the events'
    id, usage, timings and finish reason; the record is built from it once, at the end (``_finish``)."""

    def __init__(self, max_tokens: int):
        self.chunk_mono: list[int] = []
        self.chunk_unix: list[int] = []
        self.chunk_tokens: list[int] = []
        self.counter = _TokenCounter(max_tokens)
        self.state: dict[str, Any] = {
            "done": False,
            "usage": None,
            "timings": None,
            "finish_reason": None,
            "id": None,
        }

    def handler(
        self, on_chunk: Callable[[int], None] | None, text_out: list[str] | None
    ) -> Callable[[dict[str, Any], int, int], None]:
        """The per-event function (the hot path: a closure over locals, no attribute lookups per chunk)."""
        chunk_mono, chunk_unix, chunk_tokens = self.chunk_mono, self.chunk_unix, self.chunk_tokens
        counter, state = self.counter, self.state

        def handle(obj: dict[str, Any], t_mono: int, t_unix: int) -> None:
            if state["id"] is None and isinstance(obj.get("id"), str):
                state["id"] = obj["id"]
            choice = first_choice(obj)
            if choice is not None:
                n = counter.count(obj, choice)
                chunk_mono.append(t_mono)
                chunk_unix.append(t_unix)
                chunk_tokens.append(n)
                if choice.get("finish_reason") is not None:
                    state["finish_reason"] = choice["finish_reason"]
                if text_out is not None:
                    piece = choice_text(choice)
                    if piece:
                        text_out.append(piece)
                if on_chunk is not None:
                    on_chunk(n)
            usage = obj.get("usage")
            if usage.__class__ is dict:
                state["usage"] = usage
            timings = obj.get("timings")
            if timings.__class__ is dict:
                state["timings"] = timings

        return handle


class _Attempt:
    """The exchange's stamps and outcome so far (a record cut off by the abort still has them)."""

    __slots__ = ("sent", "headers_at", "status", "retries", "error")

    def __init__(self, sent: Stamp):
        self.sent = sent
        self.headers_at: Stamp | None = None
        self.status: int | None = None
        self.retries = 0
        self.error: tuple[str, str] | None = None


# How a failed exchange is recorded, first match wins (a subclass before its base).
_FAILURE_KINDS: tuple[tuple[type[BaseException] | tuple[type[BaseException], ...], str], ...] = (
    (httpx.TimeoutException, "timeout"),
    (httpx.ConnectError, "connect"),
    ((httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError), "stream_cut"),
    (SSEServerError, "server_error_event"),
    (SSEError, "protocol"),
    (httpx.HTTPError, "http_other"),
)
_FAILURES = (TimeoutError, httpx.HTTPError, SSEError)


def _failure(err: BaseException, request_timeout_s: float) -> tuple[str, str]:
    """(error kind, message) of an exchange that raised ``err``."""
    if isinstance(err, TimeoutError):
        return _error("timeout", f"no complete response within request_timeout_s={request_timeout_s}")
    kind = next(k for cls, k in _FAILURE_KINDS if isinstance(err, cls))
    return _error(kind, err)


async def stream_completion(
    client: httpx.AsyncClient,
    request: httpx.Request,
    meta: dict[str, Any],
    *,
    request_timeout_s: float,
    clock: Clock = SYSTEM_CLOCK,
    on_chunk: Callable[[int], None] | None = None,
    text_out: list[str] | None = None,
) -> RequestRecord:
    """Send one streaming completion (``/v1/completions`` or ``/v1/chat/completions``: the body says which),
    ``request`` as ``build_request`` made it (before an open-loop request's due time), and return its record.
    ``meta`` holds the record's identity fields (``request_id`` ... ``max_tokens``) and optionally ``_sink``;
    ``text_out``, when given, receives the streamed text piece by piece (a multi-turn conversation's reply).
    A connection that fails before any response is retried once, with the request built again from it.
    With ``meta["prompt_format"] == "text"`` the record's ``input_len`` is the server's
    ``usage.prompt_tokens``. Never raises, except CancelledError (after the partial record has been handed to
    ``meta['_sink']`` if one was given)."""
    identity = {k: v for k, v in meta.items() if not k.startswith("_")}
    rx = _Received(identity.get("max_tokens") or 0)
    handle, state = rx.handler(on_chunk, text_out), rx.state
    decoder = SSEDecoder()
    mono, unix = clock.mono_ns, clock.unix_ns
    at = _Attempt(stamp(clock))
    again: httpx.Request | None = request
    try:
        async with asyncio.timeout(request_timeout_s):
            while True:
                try:
                    # The request is built (body encoded) before the send stamp: what a TTFT counts starts
                    # when the request is handed to the connection, not with the client's own encoding.
                    if again is None:
                        again = client.build_request(
                            "POST", request.url, content=request.content, headers=request.headers
                        )
                    at.sent = stamp(clock)
                    resp = await client.send(again, stream=True)
                    try:
                        if not await _refused(resp, at, clock):
                            # the per-read path: two clock reads, a bytes split, one orjson.loads per event
                            async for raw in resp.aiter_raw():
                                t_mono, t_unix = mono(), unix()
                                for data in decoder.feed_data(raw):
                                    obj = payload_json(data)
                                    if obj is None:
                                        state["done"] = True
                                    else:
                                        handle(obj, t_mono, t_unix)
                            at.error = _stream_end(decoder, state)
                    finally:
                        await resp.aclose()
                    break
                except _RETRY_BEFORE_RESPONSE:
                    if at.status is not None or at.retries:
                        raise
                    at.retries += 1
                    again = None  # sent again on a fresh connection, as a request of its own
    except _FAILURES as err:
        at.error = _failure(err, request_timeout_s)
    except asyncio.CancelledError:
        at.error = _error("aborted", "cancelled by the collector (run aborted)")
        rec = _finish(identity, clock, at, rx)
        sink = meta.get("_sink")
        if sink is not None:
            sink(rec)
        raise
    return _finish(identity, clock, at, rx)


def _stream_end(decoder: SSEDecoder, state: dict[str, Any]) -> tuple[str, str] | None:
    """The body ended: the decoder's last event checked; a stream without ``[DONE]`` was cut."""
    decoder.close()
    return None if state["done"] else _error("stream_cut", "stream closed before [DONE]")


async def _refused(resp: httpx.Response, at: _Attempt, clock: Clock) -> bool:
    """Stamp the response's headers; an answer other than 200 is the exchange's error (with the start of its
    body): True then."""
    at.headers_at = stamp(clock)
    at.status = resp.status_code
    if at.status == 200:
        return False
    text = (await _head(resp, _ERROR_BODY_BYTES)).decode("utf-8", "replace")
    at.error = _error("http", f"HTTP {at.status}: {text}")
    return True


async def _head(resp: httpx.Response, limit: int) -> bytes:
    """The first ``limit`` bytes of a body (an error page may be any size; the rest is not read)."""
    out = b""
    async for raw in resp.aiter_bytes():
        out += raw
        if len(out) >= limit:
            break
    return out[:limit]


_HEADERS = {"Accept-Encoding": "identity", "Content-Type": "application/json"}


def build_request(
    client: httpx.AsyncClient, url: str, body: dict[str, Any] | bytes, headers: dict[str, str] | None = None
) -> httpx.Request:
    """The POST of ``body`` (a dict is encoded; bytes are the encoded body) with the fixed headers and
    ``headers``. Every load client of a point has the same settings, so a request built with one may be sent
    on another's connection."""
    send_headers = {**_HEADERS, **headers} if headers else _HEADERS
    content = body if isinstance(body, bytes) else orjson.dumps(body)
    return client.build_request("POST", url, content=content, headers=send_headers)


def _finish(identity: dict[str, Any], clock: Clock, at: _Attempt, rx: _Received) -> RequestRecord:
    """The request's record, built once when it ended (the per-chunk path only appends to three lists)."""
    end = stamp(clock)
    state = rx.state
    if identity.get("prompt_format") == "text":  # no ids were counted: the server's count is the length
        usage = state["usage"] or {}
        identity["input_len"] = (
            usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else 0
        )
    error = at.error
    return RequestRecord(
        **identity,
        send_mono_ns=at.sent.mono_ns,
        send_unix_ns=at.sent.unix_ns,
        headers_mono_ns=at.headers_at.mono_ns if at.headers_at else None,
        end_mono_ns=end.mono_ns,
        end_unix_ns=end.unix_ns,
        http_status=at.status,
        chunk_mono_ns=tuple(rx.chunk_mono),
        chunk_unix_ns=tuple(rx.chunk_unix),
        chunk_tokens=tuple(rx.chunk_tokens),
        token_count_source=rx.counter.source,
        done=state["done"],
        usage=state["usage"],
        finish_reason=state["finish_reason"],
        engine_timings=state["timings"],
        response_id=state["id"],
        error_kind=error[0] if error else None,
        error_message=error[1] if error else None,
        retries=at.retries,
        token_count_problem=rx.counter.problem,
    )


# Kept-alive connections, one per worker: a connection set-up per request lands in every TTFT (and costs the
# client CPU). Servers do close kept-alive connections (llama-server's HTTP library after a few requests, or
# when idle for 5 s): both transports drop an idle connection the server has closed before reusing it, a
# response saying "Connection: close" ends its connection, expiry is set below the servers' idle timeouts,
# and a request that still meets a closing connection is sent again (``stream_completion``). Each worker has
# its own client (a pool of one connection): httpcore's pool scans every connection for every request it
# places (O(connections x requests) per request; at 256 streams the biggest single cost of the client and a
# reason connections were dropped and made anew). One TLS context serves them all (making one costs ms).
KEEPALIVE_S = 2.0
_WORKER_LIMITS = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=KEEPALIVE_S)


def worker_client(transport: str, timeout: httpx.Timeout, tls: ssl.SSLContext) -> httpx.AsyncClient:
    """One load worker's client (one kept-alive connection) over ``transport`` (``[load] transport``):
    "aiohttp" (collector.protocol.aiohttp_transport: aiohttp's C parser under httpx's interface) or
    "httpcore" (httpx's own)."""
    if transport == "aiohttp":
        via = AiohttpTransport(tls, max_connections=1, keepalive_s=KEEPALIVE_S)
        return httpx.AsyncClient(timeout=timeout, transport=via)
    return httpx.AsyncClient(limits=_WORKER_LIMITS, timeout=timeout, verify=tls)
