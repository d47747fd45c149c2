"""Closed-loop load for one point: ``concurrency`` workers, each sending its next request as soon as its
previous one ended, until the point's ``requests`` are all sent (the ``vllm bench serve --max-concurrency``
protocol, with ``--request-rate inf``).

Prompts are token ids drawn from a seeded RNG (numpy PCG64) over the plan's printable, non-special id range,
so every input has exactly the requested length and a point can be replayed from its seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import ssl
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from analysis import metrics
from collector.client import stream_completion
from collector.clock import SYSTEM_CLOCK, Clock, Stamp, stamp
from collector.raw.plan import PointPlan
from collector.raw.records import RequestRecord


def prompt_token_ids(seed: int, n_requests: int, input_len: int, low: int, high: int) -> list[list[int]]:
    """``n_requests`` prompts of ``input_len`` ids, uniform on [low, high), from
    ``numpy.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    return rng.integers(low, high, size=(n_requests, input_len), dtype=np.int64).tolist()


def completion_body(
    model: str, prompt: list[int], max_tokens: int, engine_extra: dict[str, Any], plan_extra: dict[str, Any]
) -> dict[str, Any]:
    """The request every engine gets: greedy, fixed output length, usage reported at the end of the stream."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for extra in (engine_extra, plan_extra):
        for k, v in extra.items():
            if isinstance(v, dict) and isinstance(body.get(k), dict):
                body[k] = {**body[k], **v}
            else:
                body[k] = v
    return body


@dataclass
class PointOutcome:
    point_id: str
    sent: int = 0
    finished: int = 0
    ok: int = 0
    errors: Counter = field(default_factory=Counter)
    start: Stamp | None = None
    end: Stamp | None = None
    aborted: str | None = None
    probe: LagProbe | None = None
    probes: list[dict[str, Any]] = field(default_factory=list)  # one client_probe observation per shard
    cpu_ns: int | None = None  # this process's user + system CPU over the point
    wall_ns: int | None = None


PROBE_PERIOD_S = 0.05  # 20 wake-ups a second: each costs the client a wake-up of its own at low load


class LagProbe:
    """The client watching itself: a task that sleeps to a deadline every ``period_s`` and records how late
    it woke (ns). Every chunk of every stream waits for the same event loop, so a loop that wakes this task
    late reads chunks that late too; lags of tens of ms mean the client, not the server, set the pace.
    ``on_late(lag_ns)`` is called (once) when the p99 lag of the last 100 wake-ups exceeds ``warn_ns`` — the
    live warning, by the same function the analysis' gate uses (``metrics.client_loop_lag_p99_ms``)."""

    def __init__(self, period_s: float = PROBE_PERIOD_S, warn_ns: int | None = None,
                 on_late: Callable[[int], None] | None = None, clock: Clock = SYSTEM_CLOCK):  # fmt: skip
        self.period_ns = round(period_s * 1e9)
        self.due_mono_ns: list[int] = []
        self.lag_ns: list[int] = []
        self._warn_ns, self._on_late, self._clock = warn_ns, on_late, clock
        self._task: asyncio.Task | None = None

    def start(self) -> LagProbe:
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        mono, period = self._clock.mono_ns, self.period_ns
        due = mono() + period
        while True:
            await asyncio.sleep(max(0, due - mono()) / 1e9)
            now = mono()
            self.due_mono_ns.append(due)
            self.lag_ns.append(now - due)
            if self._on_late is not None and self._warn_ns is not None and now - due > self._warn_ns:
                # the gate's own rule (metrics: loop-lag p99 over the limit), on the last 100 wake-ups
                p99_ms = metrics.client_loop_lag_p99_ms(self.lag_ns[-100:])
                if p99_ms is not None and p99_ms * metrics.NS_PER_MS > self._warn_ns:
                    self._on_late(now - due)
                    self._on_late = None
            due += period
            if due <= now:  # the loop was stalled for more than a period: the next deadline is a fresh one
                due = now + period

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class Abort:
    """Why the run must stop (first reason wins), and an asyncio.Event the load waits on."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.grace_s = 0.0
        self.event = asyncio.Event()

    def set(self, reason: str, grace_s: float = 0.0) -> None:
        if self.reason is None:
            self.reason, self.grace_s = reason, grace_s
        self.event.set()

    @property
    def is_set(self) -> bool:
        return self.event.is_set()


async def run_point(
    point: PointPlan,
    *,
    base_url: str,
    model: str,
    token_id_range: tuple[int, int],
    engine_extra: dict[str, Any],
    plan_extra: dict[str, Any],
    request_timeout_s: float,
    read_timeout_s: float,
    sink: Callable[[RequestRecord], None],
    abort: Abort,
    on_chunk: Callable[[int], None] | None = None,
    on_request: Callable[[RequestRecord], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    transport: httpx.AsyncBaseTransport | None = None,
    probe: LagProbe | None = None,
    indices: Sequence[int] | None = None,
    workers: int | None = None,
    worker_offset: int = 0,
) -> PointOutcome:
    """One point's closed loop in this process. A shard (``run_load``) sends only the request ``indices`` it
    was given, with ``workers`` workers numbered from ``worker_offset``."""
    prompts = prompt_token_ids(point.seed, point.requests, point.input_len, *token_id_range)
    todo = list(range(point.requests)) if indices is None else list(indices)
    n_workers = min(point.concurrency, len(todo)) if workers is None else min(workers, len(todo))
    out = PointOutcome(point.point_id)
    url = f"{base_url}/v1/completions"
    state = {"next": 0, "connect_fail_streak": 0}
    unreachable_after = max(3, point.concurrency)

    def record(rec: RequestRecord) -> None:
        sink(rec)
        out.finished += 1
        if rec.error_kind is None:
            out.ok += 1
            state["connect_fail_streak"] = 0
        else:
            out.errors[rec.error_kind] += 1
            state["connect_fail_streak"] = (
                state["connect_fail_streak"] + 1 if rec.error_kind == "connect" else 0
            )
            if state["connect_fail_streak"] >= unreachable_after:
                abort.set(f"server unreachable: {state['connect_fail_streak']} connection failures in a row")
        if on_request is not None:
            on_request(rec)

    # Kept-alive connections, one per worker: a connection set-up per request lands in every TTFT (and costs
    # the client CPU). Servers do close kept-alive connections (llama-server's HTTP library after a few
    # requests, or when idle for 5 s): httpcore drops an idle connection the server has closed before reusing
    # it, a response saying "Connection: close" ends its connection, expiry is set below the servers' idle
    # timeouts, and a request that still meets a closing connection is sent again (collector.client).
    # Each worker has its own client (a pool of one connection): httpcore's pool scans every connection for
    # every request it places (O(connections x requests) per request; at 256 streams the biggest single cost
    # of the client and a reason connections were dropped and made anew). One TLS context serves them all
    # (making one costs milliseconds).
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=2.0)
    tls = ssl.create_default_context()
    timeout = httpx.Timeout(connect=30.0, read=read_timeout_s, write=30.0, pool=None)
    # The point's garbage is young: everything older is frozen out of the collector's reach, so a full
    # collection during the load does not walk every record of the run so far (a pause on every stream).
    gc.collect()
    gc.freeze()
    cpu0, wall0 = time.process_time_ns(), time.monotonic_ns()
    probe = probe or LagProbe(clock=clock)
    out.probe = probe
    async with contextlib.AsyncExitStack() as clients:
        shared = None
        if transport is not None:  # an injected transport (tests) serves every worker
            shared = await clients.enter_async_context(
                httpx.AsyncClient(timeout=timeout, transport=transport)
            )

        async def worker(w: int) -> None:
            client = (
                shared
                if shared is not None
                else await clients.enter_async_context(
                    httpx.AsyncClient(limits=limits, timeout=timeout, verify=tls)
                )
            )
            while not abort.is_set and state["next"] < len(todo):
                i = todo[state["next"]]
                state["next"] += 1
                out.sent += 1
                meta = {
                    "request_id": f"{point.point_id}-r{i:05d}",
                    "phase": point.phase,
                    "phase_kind": point.kind,
                    "point": point.point_id,
                    "point_index": point.index,
                    "index": i,
                    "worker": worker_offset + w,
                    "concurrency": point.concurrency,
                    "seed": point.seed,
                    "input_len": point.input_len,
                    "max_tokens": point.output_len,
                    "_sink": record,
                }
                body = completion_body(model, prompts[i], point.output_len, engine_extra, plan_extra)
                rec = await stream_completion(
                    client,
                    url,
                    body,
                    meta,
                    request_timeout_s=request_timeout_s,
                    clock=clock,
                    on_chunk=on_chunk,
                )
                record(rec)

        out.start = stamp(clock)
        probe.start()
        tasks = [asyncio.create_task(worker(w)) for w in range(n_workers)]
        abort_wait = asyncio.create_task(abort.event.wait())
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(
                    pending | {abort_wait}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(abort_wait)
                if abort_wait in done:
                    # In-flight streams get a short grace to end by themselves (a dead server fails them at
                    # once),
                    # then they are cancelled; each cancelled request still leaves its partial record.
                    if pending:
                        _, pending = await asyncio.wait(pending, timeout=abort.grace_s)
                    break
                for t in done:
                    t.result()  # a bug in a worker must surface, not vanish
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            abort_wait.cancel()
            await probe.stop()
            out.end = stamp(clock)
            out.cpu_ns, out.wall_ns = time.process_time_ns() - cpu0, time.monotonic_ns() - wall0
    gc.unfreeze()
    out.aborted = abort.reason
    return out


# ------------------------------------------------------------------------------------------------- shards

SHARD_MIN_STREAMS = 64  # below this many streams per process one event loop reads them all with time to spare


def shards_for(setting: int, concurrency: int, cores: int | None = None) -> int:
    """Load-client processes for a point: the plan's ``load.shards`` when set (at most one per stream), else
    one per ``SHARD_MIN_STREAMS`` streams, at most one per core this process may run on."""
    if setting:
        return max(1, min(setting, concurrency))
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, min(cores, concurrency // SHARD_MIN_STREAMS))


def _split(point: PointPlan, n: int, k: int) -> tuple[list[int], int, int]:
    """Shard k of n: its request indices (every n-th), its workers and the number of its first worker."""
    base, extra = divmod(point.concurrency, n)
    workers = base + (k < extra)
    return list(range(k, point.requests, n)), workers, k * base + min(k, extra)


def _shard_main(conn: Any, k: int, n: int, go: Any, stop: Any, grace: Any, kw: dict[str, Any]) -> None:
    """A shard's process: its own event loop runs its part of the point; every record goes back over the
    pipe as the request ends, then the shard's probe and CPU. Waits for ``go`` so all shards start
    together."""
    gc.collect()

    async def main() -> None:
        abort = Abort()
        point = kw.pop("point")
        indices, workers, offset = _split(point, n, k)

        def late(lag_ns: int) -> None:
            conn.send(("late", lag_ns))

        probe = LagProbe(warn_ns=kw.pop("warn_ns"), on_late=late)

        async def watch() -> None:  # the parent's abort reaches the shard within 50 ms
            while not stop.is_set():
                await asyncio.sleep(0.05)
            abort.set("stopped by the collector", grace.value)

        watcher = asyncio.create_task(watch())
        conn.send(("ready", None))
        await asyncio.to_thread(go.wait)
        out = await run_point(point, sink=lambda r: conn.send(("rec", r.to_obj())), abort=abort, probe=probe,
                              indices=indices, workers=workers, worker_offset=offset, **kw)  # fmt: skip
        watcher.cancel()
        conn.send(("end", {"sent": out.sent, "probe": _probe_obj(probe, out, k), "aborted": out.aborted}))

    asyncio.run(main())
    conn.close()


def _probe_obj(probe: LagProbe, out: PointOutcome, shard: int) -> dict[str, Any]:
    """A shard's self-observations, as the ``client_probe`` event carries them."""
    return {"shard": shard, "period_ns": probe.period_ns, "due_mono_ns": probe.due_mono_ns,
            "lag_ns": probe.lag_ns, "cpu_ns": out.cpu_ns, "wall_ns": out.wall_ns}  # fmt: skip


async def run_load(
    point: PointPlan,
    *,
    shards: int,
    sink: Callable[[RequestRecord], None],
    abort: Abort,
    on_request: Callable[[RequestRecord], None] | None = None,
    on_chunk: Callable[[int], None] | None = None,
    on_late: Callable[[int], None] | None = None,
    warn_ns: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
    **kw: Any,
) -> PointOutcome:
    """One point over ``shards`` processes (``run_point`` in this one when 1). Each shard runs its own event
    loop with its share of the workers and of the request indices; this process writes every record as it
    arrives (``sink``), so requests.jsonl is one stream on the one CLOCK_MONOTONIC of the host. The outcome's
    ``probes`` hold one ``client_probe`` observation per shard."""
    if shards <= 1:
        probe = LagProbe(warn_ns=warn_ns, on_late=on_late, clock=clock)
        out = await run_point(point, sink=sink, abort=abort, on_request=on_request, on_chunk=on_chunk,
                              clock=clock, probe=probe, **kw)  # fmt: skip
        out.probes = [_probe_obj(probe, out, 0)]
        return out
    mp = multiprocessing.get_context("spawn")  # no fork of a process with threads (sampler, server watcher)
    go, stop, grace = mp.Event(), mp.Event(), mp.Value("d", 0.0)
    loop = asyncio.get_running_loop()
    out = PointOutcome(point.point_id)
    out.probes = []
    state = {"streak": 0, "ended": 0, "ready": 0}
    unreachable_after = max(3, point.concurrency)
    all_ready, all_ended = loop.create_future(), loop.create_future()
    procs, conns = [], []
    for k in range(shards):
        rx, tx = mp.Pipe(duplex=False)
        p = mp.Process(
            target=_shard_main,
            args=(tx, k, shards, go, stop, grace, {"point": point, "warn_ns": warn_ns, **kw}),
            daemon=True,
        )
        p.start()
        tx.close()
        procs.append(p)
        conns.append(rx)

    def receive(rx: Any) -> None:
        try:
            while rx.poll():
                what, obj = rx.recv()
                if what == "rec":
                    rec = RequestRecord.from_obj(obj)
                    sink(rec)
                    out.finished += 1
                    if rec.error_kind is None:
                        out.ok += 1
                        state["streak"] = 0
                    else:
                        out.errors[rec.error_kind] += 1
                        state["streak"] = state["streak"] + 1 if rec.error_kind == "connect" else 0
                        if state["streak"] >= unreachable_after:
                            abort.set(f"server unreachable: {state['streak']} connection failures in a row")
                    if on_chunk is not None:
                        on_chunk(sum(rec.chunk_tokens))
                    if on_request is not None:
                        on_request(rec)
                elif what == "ready":
                    state["ready"] += 1
                    if state["ready"] == shards and not all_ready.done():
                        all_ready.set_result(None)
                elif what == "late" and on_late is not None:
                    on_late(obj)
                elif what == "end":
                    out.sent += obj["sent"]
                    out.probes.append(obj["probe"])
                    raise EOFError
        except (EOFError, OSError):
            loop.remove_reader(rx.fileno())
            state["ended"] += 1
            if state["ended"] == shards and not all_ended.done():
                all_ended.set_result(None)
            if not all_ready.done() and state["ended"]:
                all_ready.set_result(None)  # a shard died before it was ready: the point ends below

    for rx in conns:
        loop.add_reader(rx.fileno(), receive, rx)

    async def relay_abort() -> None:
        await abort.event.wait()
        grace.value = abort.grace_s
        stop.set()

    relay = asyncio.create_task(relay_abort())
    try:
        await all_ready
        out.start = stamp(clock)
        go.set()
        await all_ended
    finally:
        stop.set()
        relay.cancel()
        for p in procs:
            await asyncio.to_thread(p.join, 10)
            if p.is_alive():
                p.kill()
        for rx in conns:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_reader(rx.fileno())
            rx.close()
        out.end = stamp(clock)
    dead = [p.exitcode for p in procs if p.exitcode not in (0, None)]
    if dead and not abort.is_set:
        abort.set(f"a load-client shard exited with code {dead[0]}")
    out.aborted = abort.reason
    return out
