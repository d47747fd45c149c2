"""Metronome: an OpenAI-compatible streaming server that emits every token at a known CLOCK_MONOTONIC time,
so a load client's timestamps can be checked against the truth (a bench and test instrument, not product
code).

    python -m benchmarks.metronome --port 8123 --cpu 0 --first-token-ms 50 --interval-ms 20 \
        [--jitter-ms 0] [--spike-every 10 --spike-ms 10] [--seed 1] [--model metronome]

Serves ``POST /v1/completions`` and ``/v1/chat/completions`` (SSE with ``stream: true``: one event per token,
the usage chunk when ``stream_options.include_usage`` asks for it, ``[DONE]``; a plain JSON answer at the end
of the schedule otherwise), ``GET /health``, ``/v1/models``, ``/version``, a minimal ``/metrics``, and the
ground truth: ``GET /metronome/log`` (every request's receive time and every token's due and actual emit time)
and ``POST /metronome/reset``. Output length is the request's ``max_tokens`` (``max_completion_tokens``).
``--drop-after N`` closes each connection, unannounced, after its N-th answer (a server closing kept-alive
connections under the client).

Schedule of one request (ns on CLOCK_MONOTONIC): token 0 is due ``first_token_ms`` after the request was read
whole; token k (k ≥ 1) ``interval_ms`` (± a uniform ``jitter_ms``, seeded per request) after token k − 1, plus
``spike_ms`` when k is a multiple of ``spike_every`` (a late token: the pattern per-request averages hide).
A request may override any of these in a ``metronome`` object of its body.

Each token event carries ``emit_ns`` (CLOCK_MONOTONIC read just before the bytes are written: the same host's
client can difference its own receive time against it) and ``due_ns``. Emit accuracy: one thread, epoll with
an absolute-deadline ``timerfd`` armed ``SPIN_NS`` before the next due time (timer slack set to 1 ns), then
a spin to the deadline — asyncio's timers round to 1 ms. The process pins itself to one core, freezes and
disables the garbage collector, and locks its memory (this VM pages out memory idle for about a minute); the
log's ``emit_error_ns`` (actual − due) is its self-check.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import heapq
import json
import os
import random
import select
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPIN_NS = 150_000  # wake this long before a deadline, then spin: covers timerfd wake-up latency on a busy box
_mono = time.monotonic_ns

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1
_MCL_CURRENT, _MCL_FUTURE = 1, 2
_PR_SET_TIMERSLACK = 29


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class DeadlineTimer:
    """A ``timerfd`` on CLOCK_MONOTONIC armed at absolute times (ns): readable in epoll when the time
    comes."""

    def __init__(self) -> None:
        self.fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._spec = _Itimerspec()
        self.armed_at: int | None = None

    def arm(self, at_ns: int) -> None:
        if self.armed_at == at_ns:
            return
        self._spec.it_value.tv_sec, self._spec.it_value.tv_nsec = divmod(max(at_ns, 1), 1_000_000_000)
        if _libc.timerfd_settime(self.fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")
        self.armed_at = at_ns

    def clear(self) -> None:
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            pass
        self.armed_at = None


def harden(cpu: int | None, realtime: bool = False) -> dict[str, Any]:
    """Own core (real-time priority on it), no GC pauses, locked memory, 1 ns timer slack; what worked is
    returned (and logged)."""
    out: dict[str, Any] = {}
    if cpu is not None:
        try:
            os.sched_setaffinity(0, {cpu})
            out["cpu"] = cpu
        except OSError as err:
            out["cpu_error"] = str(err)
    if realtime:
        # a shared box has no free core: real-time priority makes core 0 effectively ours (the kernel's RT
        # throttling still leaves others 5 %, and the loop sleeps in epoll between deadlines)
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            out["sched"] = "SCHED_FIFO 10"
        except (OSError, AttributeError) as err:
            out["sched_error"] = str(err)
    out["timerslack_ok"] = _libc.prctl(_PR_SET_TIMERSLACK, 1, 0, 0, 0) == 0
    gc.collect()
    gc.freeze()
    gc.disable()
    out["mlockall_ok"] = _libc.mlockall(_MCL_CURRENT | _MCL_FUTURE) == 0
    if not out["mlockall_ok"]:
        out["mlockall_errno"] = ctypes.get_errno()
    return out


@dataclass
class Schedule:
    first_token_ms: float = 50.0
    interval_ms: float = 20.0
    jitter_ms: float = 0.0
    spike_every: int = 0
    spike_ms: float = 0.0
    seed: int = 1

    def with_overrides(self, o: Any) -> Schedule:
        if not isinstance(o, dict):
            return self
        vals = {k: o.get(k, getattr(self, k)) for k in self.__dataclass_fields__}
        return Schedule(**vals)

    def due_times(self, t0_ns: int, n: int, rid: int) -> list[int]:
        """Due time of each of the n tokens (ns), token 0 ``first_token_ms`` after t0."""
        rng = random.Random(self.seed * 1_000_003 + rid) if self.jitter_ms else None
        out, t = [], t0_ns + round(self.first_token_ms * 1e6)
        for k in range(n):
            if k:
                gap = self.interval_ms + (rng.uniform(-self.jitter_ms, self.jitter_ms) if rng else 0.0)
                if self.spike_every and k % self.spike_every == 0:
                    gap += self.spike_ms
                t += round(max(gap, 0.0) * 1e6)
            out.append(t)
        return out


@dataclass
class Stream:
    """One request being answered: its schedule, what was emitted, and the bytes it needs."""

    rid: int
    conn: Conn
    chat: bool
    streaming: bool
    n: int
    prompt_tokens: int
    include_usage: bool
    recv_ns: int
    due: list[int]
    emitted: list[int] = field(default_factory=list)
    sent_after: list[int] = field(default_factory=list)
    k: int = 0
    head: bytes = b""
    done_ns: int | None = None


@dataclass
class Conn:
    sock: socket.socket
    inbuf: bytearray = field(default_factory=bytearray)
    out: bytearray = field(default_factory=bytearray)
    busy: bool = False  # a streamed answer is in progress (HTTP/1.1: one request at a time)
    close_after: bool = False
    closed: bool = False
    requests: int = 0


def _chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class Metronome:
    def __init__(self, host: str, port: int, schedule: Schedule, model: str, max_model_len: int = 1 << 20,
                 drop_after: int = 0):  # fmt: skip
        self.schedule, self.model, self.max_model_len = schedule, model, max_model_len
        self.drop_after = drop_after  # close a connection without notice after this many answers (0: never)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((host, port))
        self.lsock.listen(4096)
        self.lsock.setblocking(False)
        self.port = self.lsock.getsockname()[1]
        self.ep = select.epoll()
        self.timer = DeadlineTimer()
        self.ep.register(self.lsock.fileno(), select.EPOLLIN)
        self.ep.register(self.timer.fd, select.EPOLLIN)
        self.conns: dict[int, Conn] = {}
        self.heap: list[tuple[int, int, Stream]] = []
        self.log: list[Stream] = []
        self.next_rid = 0
        self.created = int(time.time())
        self.hardening: dict[str, Any] = {}
        self.counts = {"connections": 0, "requests": 0, "tokens": 0, "send_blocked": 0, "running": 0}

    # -- network -----------------------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                s, _ = self.lsock.accept()
            except BlockingIOError:
                return
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns[s.fileno()] = Conn(s)
            self.ep.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
            self.counts["connections"] += 1

    def _close(self, c: Conn) -> None:
        if c.closed:
            return
        c.closed = True
        fd = c.sock.fileno()
        self.conns.pop(fd, None)
        try:
            self.ep.unregister(fd)
        except (OSError, ValueError):
            pass
        c.sock.close()

    def _send(self, c: Conn, data: bytes) -> None:
        if c.closed:
            return
        if c.out:
            c.out += data
            return
        try:
            n = c.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self._close(c)
            return
        if n < len(data):
            self.counts["send_blocked"] += 1
            c.out += data[n:]
            self.ep.modify(c.sock.fileno(), select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP)

    def _flush(self, c: Conn) -> None:
        try:
            n = c.sock.send(c.out)
        except BlockingIOError:
            return
        except OSError:
            self._close(c)
            return
        del c.out[:n]
        if not c.out:
            self.ep.modify(c.sock.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
            if c.close_after and not c.busy:
                self._close(c)

    def _readable(self, c: Conn) -> None:
        try:
            data = c.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(c)  # the client went away (a stream in progress keeps its log: emits stop)
            return
        c.inbuf += data
        self._parse(c)

    def _parse(self, c: Conn) -> None:
        """Answer every complete request in the input buffer (one at a time: a stream holds the
        connection)."""
        while not c.busy and not c.closed:
            end = c.inbuf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(c.inbuf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, version = lines[0].split(" ", 2)
            except ValueError:
                self._respond(c, 400, b'{"error":"bad request line"}', close=True)
                return
            headers = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                headers[k.strip().lower()] = v.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(c.inbuf) < end + 4 + length:
                return
            body = bytes(c.inbuf[end + 4 : end + 4 + length])
            del c.inbuf[: end + 4 + length]
            recv_ns = _mono()
            c.requests += 1
            c.close_after = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
            self._route(c, method, target.split("?", 1)[0], body, recv_ns)

    def _respond(
        self, c: Conn, status: int, body: bytes, ctype: str = "application/json", close=False
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "OK")
        close = close or c.close_after
        head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n").encode()  # fmt: skip
        self._send(c, head + body)
        if close:
            c.close_after = True
            if not c.out:
                self._close(c)

    def _route(self, c: Conn, method: str, path: str, body: bytes, recv_ns: int) -> None:
        if path in ("/v1/completions", "/v1/chat/completions") and method == "POST":
            try:
                req = json.loads(body or b"{}")
            except ValueError:
                self._respond(c, 400, b'{"error":{"message":"body is not JSON"}}')
                return
            self._start(c, req, path.endswith("chat/completions"), recv_ns)
        elif path == "/health":
            self._respond(c, 200, b"{}")
        elif path == "/v1/models":
            self._respond(
                c,
                200,
                json.dumps(
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": self.model,
                                "object": "model",
                                "owned_by": "metronome",
                                "max_model_len": self.max_model_len,
                            }
                        ],
                    }
                ).encode(),
            )
        elif path == "/version":
            self._respond(c, 200, b'{"version":"metronome-1"}')
        elif path == "/metrics":
            text = "".join(f"metronome_{k} {v}\n" for k, v in self.counts.items())
            self._respond(c, 200, text.encode(), "text/plain; version=0.0.4")
        elif path == "/metronome/log":
            self._respond(c, 200, json.dumps(self.log_doc()).encode())
        elif path == "/metronome/reset" and method == "POST":
            self.log = [s for s in self.log if s.done_ns is None]
            self._respond(c, 200, b"{}")
        else:
            self._respond(c, 404, b'{"error":{"message":"not found"}}')

    # -- streams ----------------------------------------------------------------------------------------
    def _start(self, c: Conn, req: dict[str, Any], chat: bool, recv_ns: int) -> None:
        n = req.get("max_tokens") or req.get("max_completion_tokens") or 16
        n = max(int(n), 1)
        prompt = req.get("prompt") if not chat else req.get("messages")
        if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
            prompt_tokens = len(prompt)
        else:
            prompt_tokens = max(1, len(json.dumps(prompt, ensure_ascii=False).split()))
        sched = self.schedule.with_overrides(req.get("metronome"))
        rid = self.next_rid
        self.next_rid += 1
        opts = req.get("stream_options") or {}
        st = Stream(rid=rid, conn=c, chat=chat, streaming=bool(req.get("stream")), n=n,
                    prompt_tokens=prompt_tokens, include_usage=bool(opts.get("include_usage")),
                    recv_ns=recv_ns, due=sched.due_times(recv_ns, n, rid))  # fmt: skip
        obj = "chat.completion.chunk" if chat else "text_completion"
        st.head = (f'{{"id":"{"chatcmpl" if chat else "cmpl"}-metro-{rid}","object":"{obj}",'
                   f'"created":{self.created},"model":"{self.model}","choices":[').encode()  # fmt: skip
        self.log.append(st)
        self.counts["requests"] += 1
        self.counts["running"] += 1
        c.busy = True
        if st.streaming:
            self._send(c, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                          b"Transfer-Encoding: chunked\r\n"
                          + (b"Connection: close\r\n\r\n" if c.close_after else b"\r\n"))  # fmt: skip
            heapq.heappush(self.heap, (st.due[0], rid, st))
        else:
            heapq.heappush(self.heap, (st.due[-1], rid, st))

    def _emit(self, st: Stream) -> None:
        """Write the next token of ``st`` (all of a non-streamed answer), stamping the actual emit time."""
        c = st.conn
        if not st.streaming:
            t = _mono()
            st.emitted.extend([t] * st.n)
            text = " a" * st.n
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                if st.chat
                else {"index": 0, "text": text, "finish_reason": "length"}
            )
            body = json.dumps({"id": f"cmpl-metro-{st.rid}", "object": "chat.completion" if st.chat else
                               "text_completion", "created": self.created, "model": self.model,
                               "choices": [choice], "usage": self._usage(st)}).encode()  # fmt: skip
            c.busy = False
            self._respond(c, 200, body)
            self._finish(st, t)
            return
        k = st.k
        last = k == st.n - 1
        fin = b'"length"' if last else b"null"
        if st.chat:
            delta = b'{"role":"assistant","content":" a"}' if k == 0 else b'{"content":" a"}'
            choice = b'{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}' % (delta, fin)
        else:
            choice = b'{"index":0,"text":" a","logprobs":null,"finish_reason":%s}' % fin
        t = _mono()
        payload = b'data: %s%s],"usage":null,"due_ns":%d,"emit_ns":%d,"k":%d}\n\n' % (
            st.head, choice, st.due[k], t, k)  # fmt: skip
        data = _chunked(payload)
        if last:
            if st.include_usage:
                data += _chunked(
                    b'data: %s],"usage":%s}\n\n' % (st.head, json.dumps(self._usage(st)).encode())
                )
            data += _chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self._send(c, data)
        st.emitted.append(t)
        st.sent_after.append(_mono())
        self.counts["tokens"] += 1
        st.k += 1
        if last:
            c.busy = False
            self._finish(st, t)
            if (c.close_after or (self.drop_after and c.requests >= self.drop_after)) and not c.out:
                self._close(
                    c
                )  # drop_after: like a server whose kept-alive connections close under the client
            elif c.inbuf and not c.closed:
                self._parse(c)  # a request pipelined behind this stream: no new bytes will wake us for it
        else:
            heapq.heappush(self.heap, (st.due[st.k], st.rid, st))

    def _usage(self, st: Stream) -> dict[str, int]:
        return {"prompt_tokens": st.prompt_tokens, "completion_tokens": st.n,
                "total_tokens": st.prompt_tokens + st.n}  # fmt: skip

    def _finish(self, st: Stream, t: int) -> None:
        st.done_ns = t
        self.counts["running"] -= 1

    # -- loop -------------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        heap, timer = self.heap, self.timer
        while True:
            if heap:
                wake = heap[0][0] - SPIN_NS
                if wake <= _mono():
                    timeout = 0.0
                else:
                    timer.arm(wake)
                    timeout = -1
            else:
                timeout = -1
            for fd, ev in self.ep.poll(timeout):
                if fd == timer.fd:
                    timer.clear()
                elif fd == self.lsock.fileno():
                    self._accept()
                else:
                    c = self.conns.get(fd)
                    if c is None:
                        continue
                    if ev & select.EPOLLOUT and c.out:
                        self._flush(c)
                    if ev & (select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR):
                        self._readable(c)
            # everything due within the spin window: spin to its deadline, then write it
            while heap and heap[0][0] - SPIN_NS <= _mono():
                due, _, st = heap[0]
                while _mono() < due:
                    pass
                heapq.heappop(heap)
                if st.conn.closed:
                    if st.done_ns is None:
                        self._finish(st, _mono())
                    continue
                self._emit(st)

    # -- ground truth -----------------------------------------------------------------------------------
    def log_doc(self) -> dict[str, Any]:
        errs = [e - d for s in self.log for e, d in zip(s.emitted, s.due, strict=False)] if self.log else []
        sends = [a - e for s in self.log for e, a in zip(s.emitted, s.sent_after, strict=False)]
        return {
            "schedule": self.schedule.__dict__,
            "hardening": self.hardening,
            "counts": dict(self.counts),
            "emit_error_ns": _summary(errs),
            "send_ns": _summary(sends),
            "requests": [
                {
                    "id": f"{'chatcmpl' if s.chat else 'cmpl'}-metro-{s.rid}",
                    "rid": s.rid,
                    "recv_ns": s.recv_ns,
                    "done_ns": s.done_ns,
                    "n": s.n,
                    "due_ns": s.due[: len(s.emitted)],
                    "emit_ns": s.emitted,
                }
                for s in self.log
            ],
        }


def _summary(xs: Sequence[int]) -> dict[str, Any]:
    if not xs:
        return {"n": 0}
    s = sorted(xs)

    def q(p: float) -> int:
        return s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]

    return {"n": len(s), "p50": q(0.5), "p99": q(0.99), "p999": q(0.999), "max": s[-1], "min": s[0]}


# --------------------------------------------------------------------------------------- process handle


def collector_plan(url: str, campaign: str, run: str, concurrency: int, requests: int, input_len: int,
                   output_len: int, *, phase: str = "load", description: str | None = None,
                   interval_s: float | None = None) -> str:  # fmt: skip
    """A ``collector run`` plan (TOML text) of one closed-loop point against the metronome at ``url``: the
    plan bench_fidelity and the client tests send (vLLM's API, printable token ids, no nvidia-smi, no drain).
    ``interval_s`` sets the sampler's period (else the plan default)."""
    head = f'campaign = "{campaign}"\nrun = "{run}"\n'
    if description is not None:
        head += f'description = "{description}"\n'
    sampling = "" if interval_s is None else f"interval_s = {interval_s}\n"
    point = f"concurrency = {concurrency}, requests = {requests}, input_len = {input_len}"
    return f"""{head}[server]
engine = "vllm"
url = "{url}"
served_model_name = "metronome"
[model]
config = "Qwen2.5-7B-Instruct"
gpu = "cpu"
token_id_range = [32, 127]
[sampling]
{sampling}nvidia_smi = "off"
[load]
drain_s = 0
[[phase]]
name = "{phase}"
kind = "concurrency"
points = [{{ {point}, output_len = {output_len}, seed = 1 }}]
"""


class MetronomeProcess:
    """Start the metronome in its own process (``python -m benchmarks.metronome``), wait for /health, read its
    log, stop it. Used by the fidelity bench and the tests."""

    def __init__(self, port: int, cpu: int | None = None, **schedule: Any):
        self.port, self.cpu, self.schedule = port, cpu, schedule
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0) -> MetronomeProcess:
        args = [sys.executable, "-m", "benchmarks.metronome", "--port", str(self.port)]
        if self.cpu is not None:
            args += ["--cpu", str(self.cpu), "--realtime"]
        for k, v in self.schedule.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.proc = subprocess.Popen(
            args, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"metronome exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if s.recv(100).startswith(b"HTTP/1.1 200"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"metronome on port {self.port} did not answer /health within {timeout_s} s")

    def _http(self, method: str, path: str) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                      .encode())  # fmt: skip
            buf = b""
            while chunk := s.recv(1 << 20):
                buf += chunk
        return buf.split(b"\r\n\r\n", 1)[1]

    def log(self) -> dict[str, Any]:
        return json.loads(self._http("GET", "/metronome/log"))

    def reset(self) -> None:
        self._http("POST", "/metronome/reset")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> MetronomeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8123)
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core")
    ap.add_argument("--model", default="metronome")
    ap.add_argument("--first-token-ms", type=float, default=50.0)
    ap.add_argument("--interval-ms", type=float, default=20.0)
    ap.add_argument("--jitter-ms", type=float, default=0.0)
    ap.add_argument("--spike-every", type=int, default=0)
    ap.add_argument("--spike-ms", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--realtime", action="store_true", help="SCHED_FIFO (only with --cpu: it may spin)")
    ap.add_argument(
        "--drop-after", type=int, default=0, help="close each connection after N answers, unannounced"
    )
    a = ap.parse_args(argv)
    sched = Schedule(a.first_token_ms, a.interval_ms, a.jitter_ms, a.spike_every, a.spike_ms, a.seed)
    m = Metronome(a.host, a.port, sched, a.model, drop_after=a.drop_after)
    m.hardening = harden(a.cpu, a.realtime and a.cpu is not None)
    try:
        m.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
