"""GETs with a total deadline and a size bound: the collector's small requests to a server it does not trust
(``/health``, ``/metrics``, ``/v1/models``, ``/props``).

httpx's timeouts are per read: a server that trickles its body one byte a second never trips them, and a
``/metrics`` of 100 MB is read whole into memory. Here the whole answer — connect, headers and every byte of
the body — must arrive within ``deadline_s`` and hold at most ``max_bytes``, else ``BoundExceeded`` names
which bound. The synchronous form checks the deadline between reads (each read is itself limited to the
deadline, so the worst case is about twice it); the asynchronous form is cancellable and exact.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import httpx

from collector.raw.errors import AnatomyError
from collector.raw.metric_families import SCRAPE_READ_MAX_BYTES

DEADLINE_S = 10.0
# read at most, not kept: a /metrics page is stored bounded as it arrives (collector.raw.metric_families), so
# only the deadline and this cap limit a huge one, never the memory it takes
METRICS_MAX_BYTES = SCRAPE_READ_MAX_BYTES
SMALL_MAX_BYTES = 1 << 20  # /health, /v1/models, /props, /version


class Body(Protocol):
    """Where a body's bytes go as they arrive (``feed`` may raise ``OverflowError``: a bound of its own)."""

    def feed(self, chunk: bytes) -> None: ...

    def value(self) -> bytes: ...


class WholeBody:
    """The body kept as it came."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk

    def value(self) -> bytes:
        return bytes(self.buf)


class BoundExceeded(AnatomyError, httpx.TransportError):
    """The answer did not arrive within the total deadline or was larger than the size bound (also an
    ``httpx.TransportError``, so every caller's handling of a failed request applies)."""


def _over(max_bytes: int) -> BoundExceeded:
    return BoundExceeded(f"answer larger than {max_bytes} bytes: not kept")


def _late(deadline_s: float) -> BoundExceeded:
    return BoundExceeded(f"no complete answer within {deadline_s:g} s")


def _feed(body: Body, chunk: bytes, received: int, max_bytes: int) -> int:
    """One chunk into ``body``: the bytes received so far, or ``BoundExceeded`` past either bound."""
    received += len(chunk)
    if received > max_bytes:
        raise _over(max_bytes)
    try:
        body.feed(chunk)
    except OverflowError as err:
        raise BoundExceeded(f"{err}: not kept") from None
    return received


def get(
    client: httpx.Client,
    url: str,
    *,
    deadline_s: float = DEADLINE_S,
    max_bytes: int = SMALL_MAX_BYTES,
    body: Body | None = None,
) -> tuple[int, str]:
    """GET ``url``: (HTTP status, body decoded as the response says, undecodable bytes replaced); ``body``
    (default: kept whole) decides what of it is held. Raises ``httpx.HTTPError`` (``BoundExceeded`` for a
    bound)."""
    t_end = time.monotonic() + deadline_s
    held = body if body is not None else WholeBody()
    received = 0
    with client.stream("GET", url, timeout=deadline_s) as resp:
        for chunk in resp.iter_bytes():
            received = _feed(held, chunk, received, max_bytes)
            if time.monotonic() > t_end:
                raise _late(deadline_s)
        return resp.status_code, _decode(held, resp)


def _decode(body: Body, resp: httpx.Response) -> str:
    try:
        return body.value().decode(resp.encoding or "utf-8", "replace")
    except OverflowError as err:
        raise BoundExceeded(f"{err}: not kept") from None


async def aget(
    client: httpx.AsyncClient,
    url: str,
    *,
    deadline_s: float = DEADLINE_S,
    max_bytes: int = SMALL_MAX_BYTES,
    body: Body | None = None,
) -> tuple[int, str]:
    """``get`` on the event loop: the deadline is one ``asyncio.timeout`` around the whole exchange, and a
    cancelled task stops it at once."""
    held = body if body is not None else WholeBody()
    received = 0
    try:
        async with asyncio.timeout(deadline_s):
            async with client.stream("GET", url, timeout=deadline_s) as resp:
                async for chunk in resp.aiter_bytes():
                    received = _feed(held, chunk, received, max_bytes)
                return resp.status_code, _decode(held, resp)
    except TimeoutError as err:
        raise _late(deadline_s) from err
