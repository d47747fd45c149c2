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

import httpx

from collector.raw.errors import AnatomyError

DEADLINE_S = 10.0
# vLLM's /metrics with every histogram is a few hundred KB at most; 8 MiB leaves room, and no more
METRICS_MAX_BYTES = 8 << 20
SMALL_MAX_BYTES = 1 << 20  # /health, /v1/models, /props, /version


class BoundExceeded(AnatomyError, httpx.TransportError):
    """The answer did not arrive within the total deadline or was larger than the size bound (also an
    ``httpx.TransportError``, so every caller's handling of a failed request applies)."""


def _over(max_bytes: int) -> BoundExceeded:
    return BoundExceeded(f"answer larger than {max_bytes} bytes: not kept")


def _late(deadline_s: float) -> BoundExceeded:
    return BoundExceeded(f"no complete answer within {deadline_s:g} s")


def get(
    client: httpx.Client,
    url: str,
    *,
    deadline_s: float = DEADLINE_S,
    max_bytes: int = SMALL_MAX_BYTES,
) -> tuple[int, str]:
    """GET ``url``: (HTTP status, body decoded as the response says, undecodable bytes replaced). Raises
    ``httpx.HTTPError`` (``BoundExceeded`` for a bound)."""
    t_end = time.monotonic() + deadline_s
    with client.stream("GET", url, timeout=deadline_s) as resp:
        body = bytearray()
        for chunk in resp.iter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise _over(max_bytes)
            if time.monotonic() > t_end:
                raise _late(deadline_s)
        return resp.status_code, body.decode(resp.encoding or "utf-8", "replace")


async def aget(
    client: httpx.AsyncClient,
    url: str,
    *,
    deadline_s: float = DEADLINE_S,
    max_bytes: int = SMALL_MAX_BYTES,
) -> tuple[int, str]:
    """``get`` on the event loop: the deadline is one ``asyncio.timeout`` around the whole exchange, and a
    cancelled task stops it at once."""
    try:
        async with asyncio.timeout(deadline_s):
            async with client.stream("GET", url, timeout=deadline_s) as resp:
                body = bytearray()
                async for chunk in resp.aiter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise _over(max_bytes)
                return resp.status_code, body.decode(resp.encoding or "utf-8", "replace")
    except TimeoutError as err:
        raise _late(deadline_s) from err
