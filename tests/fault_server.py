"""A small OpenAI-style completions server on 127.0.0.1 for the faults a real engine cannot be made to
produce on demand: cut streams, HTTP 429/5xx, a slow first byte, malformed SSE JSON, /metrics that stops
answering. Streams one token per event at a fixed pace (so the client can be measured against a known
schedule). Standard library only; speaks HTTP/1.1 with chunked transfer encoding and keep-alive.

Runs in-process (``FaultServer(...).start()`` in a thread) or as a process with llama-server-like arguments
(``python tests/fault_server.py -m x --host 127.0.0.1 --port N --alias name --metrics [--fault cut:3]``), so
``collector run`` can start it as if it were ``llama-server``.

Faults (``--fault KIND:EVERY``: every EVERY-th completion request, counting from 1):
``cut`` (close the socket after half the tokens), ``http500``, ``http429``, ``slow`` (first byte after
``--slow-s``), ``malformed`` (one event's JSON broken), ``hang`` (send headers then nothing).
``--metrics-down-after N``: /metrics answers 503 after N scrapes. ``--die-after N``: exit(3) when the N-th
completion request arrives. ``--vocab N``: a prompt holding an id >= N gets HTTP 400 with vLLM's message.
``--exit-at-start MSG``: print MSG and exit(1) before listening (a server that cannot start).
``--slow-start-s S``: wait S seconds before listening (a server with a long start-up).
Hostile answers (issue #20): ``--trickle-after N`` (/metrics after N scrapes, and /health always with
``--trickle-health``) sends its headers and then one byte every 0.1 s, never finishing;
``--metrics-bytes N`` pads /metrics to N bytes (``fault_tenant_requests_total`` series, 116 bytes each);
``--metrics-garbage`` answers /metrics 200 with text no
Prometheus parser takes; ``--partial-log-line`` prints a llama.cpp-like line first (analysis then reads
the log as llama.cpp's) and half a line (no newline) as its last output, on SIGTERM.
Chunk faults (as ``--fault`` kinds): ``choices_null`` / ``choices_str`` (a chunk ``{"choices": [null]}`` /
``{"choices": "abc"}``), ``counter_jump`` (the cumulative counters jump 4 ahead at token 3 and back at
token 4; the sum stays right), ``huge`` (a cumulative count of 2^62 at token 2), ``usage_lie`` (the
final usage claims 256 completion tokens), ``blank_lines`` (128 KiB of blank lines before the first
event).
``--reject-key``: every request but /health gets HTTP 401 whose body quotes the Authorization header it
sent (as servers that echo the rejected key do).
``--spawn-child``: start a child process in the server's process group first (like vLLM's engine core) and
print its pid (``fault_server child pid N``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

PAD_LINE_BYTES = 116  # one padding series: fault_tenant_requests_total{tenant="<75 digits>"} 1


class FaultServer:
    def __init__(
        self,
        port: int = 0,
        token_ms: float = 2.0,
        faults: dict[str, int] | None = None,
        slow_s: float = 2.0,
        metrics_down_after: int | None = None,
        metrics_delay_s: float = 0.0,
        metrics_names: str = "llamacpp",
        die_after: int | None = None,
        alias: str = "fault-model",
        vocab: int | None = None,
        trickle_after: int | None = None,
        trickle_health: bool = False,
        metrics_bytes: int = 0,
        metrics_garbage: bool = False,
        reject_key: bool = False,
    ):
        self.port = port
        self.token_s = token_ms / 1000.0
        self.faults = faults or {}
        self.slow_s = slow_s
        self.metrics_down_after = metrics_down_after
        self.metrics_delay_s = metrics_delay_s
        # whose /metrics names to pose with: "llamacpp", "sglang" (sglang:*), "tgi" (tgi_*), or "none" (a
        # gateway: 404, no /metrics); the names are the engines' own (their metrics reference pages)
        self.metrics_names = metrics_names
        self.die_after = die_after
        self.alias = alias
        self.vocab = vocab
        self.trickle_after = trickle_after
        self.trickle_health = trickle_health
        self.metrics_bytes = metrics_bytes
        self.metrics_garbage = metrics_garbage
        self.reject_key = reject_key
        self.n_completions = 0
        self.n_scrapes = 0
        self.tokens_total = 0
        self.running = 0
        self.max_running = 0
        self.connections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()

    # -- lifecycle (thread mode) ------------------------------------------------------------------------
    def start(self) -> FaultServer:
        threading.Thread(target=lambda: asyncio.run(self.serve()), daemon=True).start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        """Close the listening socket; a server stopped already (its loop closed) is left as it is."""
        if self._loop is not None and self._server is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._server.close)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        print(f"fault_server listening on 127.0.0.1:{self.port}", flush=True)
        try:
            await self._server.serve_forever()
        except asyncio.CancelledError:
            pass

    # -- HTTP ----------------------------------------------------------------------------------------------
    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if self.reject_key and path != "/health":
                    msg = f"Incorrect API key provided: {headers.get('authorization', '')}"
                    await self._plain(writer, 401, json.dumps({"error": {"message": msg}}).encode())
                    continue
                keep = await self._route(method, path, body, writer)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _plain(self, writer, status: int, body: bytes, ctype: str = "application/json") -> bool:
        reason = {
            200: "OK",
            400: "Bad Request",
            401: "Unauthorized",
            404: "Not Found",
            429: "Too Many Requests",
            500: "Internal Server Error",
            503: "Service Unavailable",
        }[status]
        writer.write(
            (
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
        )
        writer.write(body)
        await writer.drain()
        return True

    async def _trickle(self, writer) -> bool:
        """Headers promising 1 MB, then one byte every 0.1 s: every read returns within any per-read
        timeout, and the body never ends."""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n")
        for _ in range(1_000_000):
            writer.write(b"#")
            await writer.drain()
            await asyncio.sleep(0.1)
        return False

    async def _route(self, method: str, path: str, body: bytes, writer) -> bool:
        if path == "/health":
            if self.trickle_health:
                return await self._trickle(writer)
            return await self._plain(writer, 200, b'{"status":"ok"}')
        if path == "/metrics":
            self.n_scrapes += 1
            await asyncio.sleep(self.metrics_delay_s)
            if self.metrics_down_after is not None and self.n_scrapes > self.metrics_down_after:
                return await self._plain(writer, 503, b"metrics unavailable", "text/plain")
            if self.trickle_after is not None and self.n_scrapes > self.trickle_after:
                return await self._trickle(writer)
            if self.metrics_garbage:
                return await self._plain(writer, 200, b"<html>{{ not metrics }}\n\x00\xff}", "text/plain")
            if self.metrics_names == "none":
                return await self._plain(writer, 404, b'{"error":"not found"}')
            body = self._metrics_text().encode()
            return await self._plain(
                writer, 200, body + self._padding(len(body)), "text/plain; version=0.0.4"
            )
        if path == "/props":
            return await self._plain(
                writer,
                200,
                json.dumps({"total_slots": 8, "default_generation_settings": {"n_ctx": 512}}).encode(),
            )
        if path == "/v1/models":
            return await self._plain(writer, 200, json.dumps({"data": [{"id": self.alias}]}).encode())
        if path == "/v1/completions" and method == "POST":
            return await self._complete(json.loads(body), writer)
        return await self._plain(writer, 404, b'{"error":"not found"}')

    def _padding(self, have: int) -> bytes:
        """Series of a family no analysis reads, to make /metrics ``metrics_bytes`` long (a server with a
        label per tenant): ``PAD_LINE_BYTES`` sample lines, then newlines (made once)."""
        pad = max(0, self.metrics_bytes - have)
        if getattr(self, "_pad", (None, b""))[0] != pad:
            n = pad // PAD_LINE_BYTES
            lines = b"".join(b'fault_tenant_requests_total{tenant="%075d"} 1\n' % i for i in range(n))
            self._pad = (pad, lines + b"\n" * (pad - len(lines)))
        return self._pad[1]

    def _metrics_text(self) -> str:
        running, tokens = self.running, self.tokens_total
        if self.metrics_names == "sglang":
            return (
                "# TYPE sglang:num_running_reqs gauge\n"
                f'sglang:num_running_reqs{{model_name="{self.alias}"}} {running}\n'
                "# TYPE sglang:generation_tokens_total counter\n"
                f'sglang:generation_tokens_total{{model_name="{self.alias}"}} {tokens}\n'
            )
        if self.metrics_names == "tgi":
            return f"# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size {running}\n"
        return (
            "# HELP llamacpp:requests_processing Number of requests processing.\n"
            "# TYPE llamacpp:requests_processing gauge\n"
            f"llamacpp:requests_processing {running}\n"
            "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
            "# TYPE llamacpp:tokens_predicted_total counter\n"
            f"llamacpp:tokens_predicted_total {tokens}\n"
        )

    def _fault(self, n: int) -> str | None:
        for kind, every in self.faults.items():
            if every > 0 and n % every == 0:
                return kind
        return None

    async def _complete(self, req: dict, writer) -> bool:
        self.n_completions += 1
        n = self.n_completions
        if self.die_after is not None and n >= self.die_after:
            os._exit(3)
        fault = self._fault(n)
        if self.vocab is not None and max(req["prompt"], default=0) >= self.vocab:
            msg = f"Token id {max(req['prompt'])} is out of vocabulary"
            body = {"error": {"message": msg, "type": "BadRequestError", "code": 400}}
            return await self._plain(writer, 400, json.dumps(body).encode())
        if fault == "http500":
            return await self._plain(writer, 500, b'{"error":"injected 500"}')
        if fault == "http429":
            return await self._plain(writer, 429, b'{"error":"injected 429"}')
        prompt_n, max_tokens = len(req["prompt"]), int(req["max_tokens"])
        continuous = bool((req.get("stream_options") or {}).get("continuous_usage_stats"))
        timings = bool(req.get("timings_per_token"))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        await writer.drain()
        if fault == "hang":
            await asyncio.sleep(3600)
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
        if fault == "blank_lines":
            blank = b"\n" * 65536
            for _ in range(2):
                writer.write(f"{len(blank):x}\r\n".encode() + blank + b"\r\n")

        async def send(obj: dict | str) -> None:
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            await writer.drain()

        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            t0 = time.monotonic()
            for i in range(1, max_tokens + 1):
                await asyncio.sleep(self.token_s)
                if fault == "cut" and i > max_tokens // 2:
                    writer.transport.abort()  # no terminating chunk: a cut stream
                    return False
                if fault == "malformed" and i == 2:
                    await send('{"choices": [{"text": "x", "index": 0')
                    continue
                if fault in ("choices_null", "choices_str") and i == 2:
                    await send({"choices": [None]} if fault == "choices_null" else {"choices": "abc"})
                    continue
                self.tokens_total += 1
                ev: dict = {
                    "id": f"cmpl-{n}",
                    "object": "text_completion",
                    "model": self.alias,
                    "choices": [
                        {"index": 0, "text": "a", "finish_reason": "length" if i == max_tokens else None}
                    ],
                }
                n_so_far = _claimed(fault, i)
                if continuous:
                    ev["usage"] = {
                        "prompt_tokens": prompt_n,
                        "completion_tokens": n_so_far,
                        "total_tokens": prompt_n + n_so_far,
                    }
                if timings:
                    ev["timings"] = {"prompt_n": prompt_n, "predicted_n": n_so_far,
                                     "predicted_ms": (time.monotonic() - t0) * 1000.0}  # fmt: skip
                await send(ev)
            out_n = 256 if fault == "usage_lie" else max_tokens
            usage = {
                "prompt_tokens": prompt_n,
                "completion_tokens": out_n,
                "total_tokens": prompt_n + out_n,
            }
            await send({"id": f"cmpl-{n}", "object": "text_completion", "choices": [], "usage": usage})
            await send("[DONE]")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            self.running -= 1


def _claimed(fault: str | None, i: int) -> int:
    """The cumulative token count sent with token i: i, except under a counter fault."""
    if fault == "counter_jump" and i == 3:
        return i + 4
    if fault == "huge" and i == 2:
        return 2**62
    return i


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default="x")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--alias", default="fault-model")
    ap.add_argument("--metrics", action="store_true")
    ap.add_argument("--version", action="store_true")
    ap.add_argument("--token-ms", type=float, default=2.0)
    ap.add_argument("--fault", action="append", default=[])
    ap.add_argument("--slow-s", type=float, default=2.0)
    ap.add_argument("--metrics-down-after", type=int, default=None)
    ap.add_argument("--metrics-delay-s", type=float, default=0.0)
    ap.add_argument("--die-after", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--exit-at-start", default=None)
    ap.add_argument("--spawn-child", action="store_true")
    ap.add_argument("--reject-key", action="store_true")
    ap.add_argument("--slow-start-s", type=float, default=0.0)
    ap.add_argument("--trickle-after", type=int, default=None)
    ap.add_argument("--trickle-health", action="store_true")
    ap.add_argument("--metrics-bytes", type=int, default=0)
    ap.add_argument("--metrics-garbage", action="store_true")
    ap.add_argument("--partial-log-line", action="store_true")
    # llama-server flags the test plans pass, accepted and ignored (and listed by --help, which the
    # collector's
    # pre-flight reads to refuse flags the server does not know)
    for flag in ("--cache-ram", "--slot-prompt-similarity", "-np", "-c", "-t", "-lv", "--api-key"):
        ap.add_argument(flag, default=None)
    args, _unknown = ap.parse_known_args(argv)
    if args.version:
        print("fault_server 1 (test double)")
        return
    faults = {k: int(v) for k, v in (f.split(":") for f in args.fault)}
    srv = FaultServer(port=args.port, token_ms=args.token_ms, faults=faults, slow_s=args.slow_s,
                      metrics_down_after=args.metrics_down_after, metrics_delay_s=args.metrics_delay_s,
                      die_after=args.die_after, alias=args.alias, vocab=args.vocab,
                      trickle_after=args.trickle_after, trickle_health=args.trickle_health,
                      metrics_bytes=args.metrics_bytes, metrics_garbage=args.metrics_garbage,
                      reject_key=args.reject_key)  # fmt: skip
    if args.exit_at_start:
        print("fault_server: starting", flush=True)
        print(args.exit_at_start, flush=True)
        sys.exit(1)
    print(f"fault_server: {' '.join(sys.argv[1:])}", flush=True)
    if args.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"fault_server child pid {child.pid}", flush=True)
    if args.partial_log_line:  # the log ends mid-line, as when a server is killed while it prints
        print("llama_model_loader: loaded meta data with 0 key-value pairs (fault_server)", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: (sys.stdout.write("fault_server: stopping, half a li"),
                                                  sys.stdout.flush(), os._exit(0)))  # fmt: skip
    time.sleep(args.slow_start_s)
    asyncio.run(srv.serve())


if __name__ == "__main__":
    main()
