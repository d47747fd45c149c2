"""An httpx transport that sends through aiohttp (``[load] transport = "aiohttp"``): httpx stays the client's
interface (requests, responses, timeouts, the error classes the records are sorted by), aiohttp's C HTTP
parser and connection does the per-chunk work.

Why: on one core the streaming hot path's cost is mostly the transport's, per read (httpcore's pure-Python
HTTP/1.1 state machine and its anyio stream layers; aiohttp parses in C, llhttp, and hands a read's bytes
straight to the reader). The methodology page measures both on the same core.

Why not the ``httpx-aiohttp`` package: it maps aiohttp's "server disconnected" onto httpx's ConnectTimeout,
so a stream the server cut would be recorded as a timeout. Here each aiohttp failure becomes the httpx error
httpcore raises for the same event, so records read alike whichever transport ran (the fault tests run
both).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx
from aiohttp.http_exceptions import HttpProcessingError

# first match wins: a subclass before its base
_ERRORS: tuple[
    tuple[type[BaseException] | tuple[type[BaseException], ...], type[httpx.TransportError]], ...
] = (
    (aiohttp.ConnectionTimeoutError, httpx.ConnectTimeout),
    (aiohttp.ServerTimeoutError, httpx.ReadTimeout),  # sock_read: the longest silence between two reads
    (aiohttp.ClientConnectorError, httpx.ConnectError),
    (aiohttp.ServerDisconnectedError, httpx.RemoteProtocolError),  # closed before the response ended
    (
        (aiohttp.ClientPayloadError, aiohttp.ClientResponseError, HttpProcessingError),
        httpx.RemoteProtocolError,
    ),
    (aiohttp.ClientOSError, httpx.ReadError),  # a reset or broken pipe on an open connection
    (aiohttp.ClientConnectionError, httpx.ReadError),
    (aiohttp.ClientError, httpx.TransportError),
)


@contextlib.contextmanager
def _as_httpx(request: httpx.Request) -> Iterator[None]:
    """aiohttp's errors raised as the httpx errors httpcore gives for the same event."""
    try:
        yield
    except (aiohttp.ClientError, HttpProcessingError) as err:
        cls = next(c for kind, c in _ERRORS if isinstance(err, kind))
        raise cls(f"{type(err).__name__}: {err}", request=request) from err


class _Body(httpx.AsyncByteStream):
    """A response body as aiohttp reads it: each read's bytes as soon as they arrive (``iter_any``)."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx.Request):
        self.response, self.request = response, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx(self.request):
            async for data in self.response.content.iter_any():
                yield data

    async def aclose(self) -> None:
        # a body read to its end leaves its connection kept alive for the next request; a body not read to
        # its end closes it (its unread rest must never be taken for the next response)
        if self.response.content.at_eof():
            self.response.release()
        else:
            self.response.close()


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session (its own connector of at most ``max_connections``, kept alive ``keepalive_s``)
    behind an httpx client: ``httpx.AsyncClient(transport=AiohttpTransport(...))``."""

    def __init__(self, tls: ssl.SSLContext, max_connections: int = 1, keepalive_s: float = 2.0):
        self.tls, self.max_connections, self.keepalive_s = tls, max_connections, keepalive_s
        self.session: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        """Made on the first request, inside the running loop (aiohttp binds a session to its loop)."""
        if self.session is None:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, keepalive_timeout=self.keepalive_s, ssl=self.tls
            )
            # no cookies, no default headers of its own: the request carries exactly httpx's headers
            self.session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=("User-Agent",)
            )
        return self.session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout = request.extensions.get("timeout", {})
        with _as_httpx(request):
            response = await self._session().request(
                request.method,
                str(request.url),
                headers=list(request.headers.multi_items()),
                data=request.content or None,
                allow_redirects=False,
                auto_decompress=False,
                compress=None,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=timeout.get("connect"), sock_read=timeout.get("read")
                ),
            )
        return httpx.Response(
            status_code=response.status,
            headers=list(response.raw_headers),
            stream=_Body(response, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (response.reason or "").encode()},
        )

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()
