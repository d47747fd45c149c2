"""Load for one point. Closed loop: ``concurrency`` workers, each sending its next request as soon as its
previous one ended, until the point's ``requests`` are all sent (the ``vllm bench serve --max-concurrency``
protocol, with ``--request-rate inf``). Open loop (a ``kind = "rate"`` point): each request is sent at its
time on a seeded schedule drawn before the point starts (``arrival_offsets_ns``), whatever the server is
doing, optionally capped at ``max_concurrency`` in flight; every record keeps its scheduled and actual send
time.

What each request sends (its prompt, output length, endpoint, prefix, conversation turn) is
``collector.protocol.workload``'s; by default token ids drawn from a seeded RNG (numpy PCG64) over the plan's
printable, non-special id range, so every input has exactly the requested length and a point can be replayed
from its seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import multiprocessing
import os
import signal
import ssl
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from typing import Any

import httpx
import numpy as np

from analysis.core import metrics
from collector.protocol.client import build_request, stream_completion, worker_client
from collector.protocol.clock import SYSTEM_CLOCK, Clock, Stamp, stamp
from collector.protocol.eventloop import run_on
from collector.protocol.workload import ENDPOINT_PATHS, WorkloadSpec, build_prompts, record_fields, turn_body
from collector.raw.plan import PointPlan, RatePlan
from collector.raw.records import RequestRecord

# --------------------------------------------------------------------------------------- open-loop schedule

ARRIVAL_STREAM = 0x5EED_A77  # the schedule's own random stream beside the prompts' (same point seed)


def _ramp_time_s(u: np.ndarray, start_rps: float, end_rps: float, ramp_s: float) -> np.ndarray:
    """Seconds at which the cumulative offered load reaches ``u`` requests under a rate rising linearly from
    ``start_rps`` to ``end_rps`` over ``ramp_s`` and constant after: the inverse of Λ(t) = s·t + (e − s)·t² /
    (2·D) for t ≤ D, Λ(D) + e·(t − D) after (the root 2u / (s + √(s² + 2(e − s)u/D)), stable at s = 0)."""
    a2 = 2.0 * (end_rps - start_rps) / ramp_s
    inside = u <= (start_rps + end_rps) * ramp_s / 2.0
    t_ramp = 2.0 * u / (start_rps + np.sqrt(start_rps**2 + a2 * u))
    t_after = ramp_s + (u - (start_rps + end_rps) * ramp_s / 2.0) / end_rps
    return np.where(inside, t_ramp, t_after)


def arrival_offsets_ns(rate: RatePlan, seed: int) -> list[int]:
    """A rate point's send times, ns after the point's start, increasing; deterministic in (``rate``,
    ``seed``). Gaps in units of the mean gap are 1 (constant), Exp(1) (poisson) or Gamma(shape=b, scale=1/b)
    (gamma, b = ``burstiness``): at a fixed rate λ the gaps are Gamma(shape=b, scale=1/(λ·b)), `vllm bench
    serve`'s ``get_request`` (mean 1/λ, coefficient of variation 1/√b; b = 1 is Poisson), and as there the
    first request waits one gap. vLLM then rescales all gaps so the N-th lands at N/λ; not here: a schedule
    cut by ``duration_s`` is the process itself. Under a linear ramp-up the same unit-mean arrivals are laid
    on the rising rate's cumulative load (``_ramp_time_s``: a time change, so burstiness keeps its meaning).
    The schedule ends before ``duration_s`` and after ``max_requests`` sends, whichever comes first."""
    rng = np.random.default_rng([ARRIVAL_STREAM, seed])
    cap = rate.max_requests
    horizon = rate.duration_s
    out: list[np.ndarray] = []
    u0, n = 0.0, 0
    while True:
        block = cap - n if cap is not None else max(64, int(rate.request_rate * (horizon or 0) * 1.2) + 16)
        if rate.arrival == "constant":
            gaps = np.ones(block)
        elif rate.arrival == "poisson":
            gaps = rng.exponential(1.0, block)
        else:
            gaps = rng.gamma(rate.burstiness, 1.0 / rate.burstiness, block)
        u = u0 + np.cumsum(gaps)
        u0 = float(u[-1])
        if rate.ramp_up_duration_s is not None:
            t_s = _ramp_time_s(u, rate.ramp_up_start_rps or 0.0, rate.request_rate, rate.ramp_up_duration_s)
        else:
            t_s = u / rate.request_rate
        if horizon is not None and t_s[-1] >= horizon:
            out.append(t_s[t_s < horizon])
            break
        out.append(t_s)
        n += block
        if cap is not None and n >= cap:
            break
    t = np.concatenate(out) if out else np.empty(0)
    return [int(x) for x in np.round(t * 1e9)]


def resolve_rate_point(point: PointPlan) -> tuple[PointPlan, list[int]]:
    """A rate point with its schedule (``arrival_offsets_ns``) and ``requests`` set to the number scheduled;
    a closed-loop point as it is, with no schedule."""
    if point.rate is None:
        return point, []
    offsets = arrival_offsets_ns(point.rate, point.seed)
    return dataclasses.replace(point, requests=len(offsets)), offsets


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
    stopped: str | None = None  # a rate point's stop condition that ended it early (max_error_rate)


PROBE_PERIOD_S = 0.05  # 20 wake-ups a second: each costs the client a wake-up of its own at low load


class LagProbe:
    """The client watching itself: a task that sleeps to a deadline every ``period_s`` and records how late
    it woke (ns). Every chunk of every stream waits for the same event loop, so a loop that wakes this task
    late reads chunks that late too; lags of tens of ms mean the client, not the server, set the pace.
    ``on_late(lag_ns)`` is called (once) when the p99 lag of the last 100 wake-ups exceeds ``warn_ns`` — the
    live warning, by the same function the analysis' gate uses (``metrics.client_loop_lag_p99_ms``)."""

    def __init__(
        self,
        period_s: float = PROBE_PERIOD_S,
        warn_ns: int | None = None,
        on_late: Callable[[int], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.period_ns = round(period_s * 1e9)
        # machine ints, 8 bytes a wake-up (72,000 an hour), not a Python int object each
        self.due_mono_ns = array("q")
        self.lag_ns = array("q")
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


@dataclass(frozen=True)
class LoadSettings:
    """Where a run's requests go and what they carry besides each prompt: the same for every point and every
    shard (pickled into the shard processes). ``headers``: the plan's and its API key's; ``workload``: what
    each request sends (collector.protocol.workload)."""

    base_url: str
    model: str
    token_id_range: tuple[int, int]
    engine_extra: dict[str, Any]
    plan_extra: dict[str, Any]
    request_timeout_s: float
    read_timeout_s: float
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    headers: dict[str, str] | None = None
    loop: str = "asyncio"  # [load] loop (collector.protocol.eventloop): the shards' loops too
    transport: str = "aiohttp"  # [load] transport: what each worker's client sends through


@dataclass(frozen=True)
class Listeners:
    """What the caller hears while a point runs, in its own process: every record as its request ends
    (``sink``, which writes it), then ``on_request``; each chunk's token count (``on_chunk``; a sharded
    point reports a request's tokens when it ends)."""

    sink: Callable[[RequestRecord], None]
    on_request: Callable[[RequestRecord], None] | None = None
    on_chunk: Callable[[int], None] | None = None


@dataclass(frozen=True)
class ShardShare:
    """A shard's part of a point (``run_load``): the request ``indices`` it sends (None: all), its
    ``workers`` (a rate point: that many in flight at most, 0 = no cap; None: the point's concurrency)
    numbered from ``worker_offset``, a rate point's schedule start (None: when its load starts) and its
    schedule as the driver computed it once (``arrival_offsets_ns`` of the whole point; None: computed here
    from the seed, the same list)."""

    indices: Sequence[int] | None = None
    workers: int | None = None
    worker_offset: int = 0
    start_mono_ns: int | None = None
    offsets_ns: Sequence[int] | None = None


class _Tally:
    """A point's ended requests counted into its outcome; ``unreachable_after`` connection failures in a row
    abort the point (the server is gone)."""

    def __init__(self, out: PointOutcome, abort: Abort, unreachable_after: int):
        self.out, self.abort, self.unreachable_after = out, abort, unreachable_after
        self.connect_fail_streak = 0

    def add(self, rec: RequestRecord) -> None:
        out = self.out
        out.finished += 1
        if rec.error_kind is None:
            out.ok += 1
            self.connect_fail_streak = 0
            return
        out.errors[rec.error_kind] += 1
        self.connect_fail_streak = self.connect_fail_streak + 1 if rec.error_kind == "connect" else 0
        if self.connect_fail_streak >= self.unreachable_after:
            self.abort.set(f"server unreachable: {self.connect_fail_streak} connection failures in a row")


class _PointLoad:
    """One point's load in this process (``run_point``): its prompts, its workers' clients, the sends."""

    def __init__(
        self,
        point: PointPlan,
        settings: LoadSettings,
        listeners: Listeners,
        abort: Abort,
        clock: Clock,
        share: ShardShare,
    ):
        if share.offsets_ns is None:
            self.point, self.offsets = resolve_rate_point(point)
        else:
            self.point = dataclasses.replace(point, requests=len(share.offsets_ns))
            self.offsets = list(share.offsets_ns)
        point = self.point
        self.settings, self.listeners, self.abort, self.clock, self.share = (
            settings,
            listeners,
            abort,
            clock,
            share,
        )
        self.spec = spec = settings.workload
        self.prompts = build_prompts(
            spec, point.seed, point.requests, point.input_len, point.output_len, *settings.token_id_range
        )
        todo = list(range(point.requests)) if share.indices is None else list(share.indices)
        if spec.turns > 1:  # a worker takes a whole conversation: its first request's index stands for it
            todo = [i for i in todo if i % spec.turns == 0]
        self.todo = todo
        cap = point.concurrency if share.workers is None else share.workers
        self.n_workers = min(cap, len(todo))
        self.out = PointOutcome(point.point_id)
        self.tally = _Tally(self.out, abort, max(3, point.concurrency))
        self.url = f"{settings.base_url}{ENDPOINT_PATHS[spec.endpoint]}"
        self.next = 0
        self.tls = ssl.create_default_context()
        self.timeout = httpx.Timeout(connect=30.0, read=settings.read_timeout_s, write=30.0, pool=None)
        self.clients = contextlib.AsyncExitStack()
        self.shared: httpx.AsyncClient | None = None  # an injected transport's client serves every worker
        self.by_worker: dict[int, httpx.AsyncClient] = {}
        self.builder: httpx.AsyncClient | None = None

    def record(self, rec: RequestRecord) -> None:
        self.listeners.sink(rec)
        self.tally.add(rec)
        _check_error_rate(self.point, self.out)
        if self.listeners.on_request is not None:
            self.listeners.on_request(rec)

    async def open_clients(self, transport: httpx.AsyncBaseTransport | None) -> None:
        """The builder client: it only builds requests (never sends): an open-loop request is built before
        its due time, when the worker that will send it is not known yet (every worker's client has these
        settings). With an injected ``transport`` (tests) one client serves every worker."""
        if transport is not None:
            self.shared = await self.clients.enter_async_context(
                httpx.AsyncClient(timeout=self.timeout, transport=transport)
            )
        self.builder = (
            self.shared
            if self.shared is not None
            else await self.clients.enter_async_context(
                httpx.AsyncClient(timeout=self.timeout, verify=self.tls)
            )
        )

    async def client_of(self, w: int) -> httpx.AsyncClient:
        """Worker ``w``'s own client (its one kept-alive connection), made when it first sends."""
        if self.shared is not None:
            return self.shared
        if w not in self.by_worker:
            self.by_worker[w] = await self.clients.enter_async_context(
                worker_client(self.settings.transport, self.timeout, self.tls)
            )
        return self.by_worker[w]

    async def worker(self, w: int) -> None:
        """A closed-loop worker: the next request (or conversation) as soon as its previous one ended."""
        spec, out = self.spec, self.out
        while not self.abort.is_set and self.next < len(self.todo):
            i = self.todo[self.next]
            self.next += 1
            if spec.turns == 1:
                out.sent += 1
                await self.dispatch(self.prepare(i), w)
                continue
            history: list[tuple[str, str]] = []  # a conversation: turns i .. i + turns - 1, in order
            for t in range(spec.turns):
                if self.abort.is_set:
                    break
                if t and spec.turn_delay_ms:  # the user's think time before the next turn
                    await asyncio.sleep(spec.turn_delay_ms / 1e3)
                out.sent += 1
                reply: list[str] = []
                await self.dispatch(self.prepare(i + t, history=history), w, reply)
                history.append((self.prompts[i + t].text or "", "".join(reply)))

    def prepare(
        self, i: int, scheduled_mono_ns: int | None = None, history: list[tuple[str, str]] | None = None
    ) -> tuple[dict[str, Any], httpx.Request]:
        """Request ``i``'s record identity and its built request (body encoded): everything of a send that
        does not depend on the moment it goes out; a rate point's carries its scheduled time."""
        point, prompt, s = self.point, self.prompts[i], self.settings
        meta: dict[str, Any] = {
            "request_id": f"{point.point_id}-r{i:05d}",
            "phase": point.phase,
            "phase_kind": point.kind,
            "point": point.point_id,
            "point_index": point.index,
            "index": i,
            "concurrency": point.concurrency,
            "seed": point.seed,
            "input_len": prompt.input_len or 0,
            "max_tokens": prompt.max_tokens,
            **record_fields(self.spec, prompt, i),
            "_sink": self.record,
        }
        if point.rate is not None:
            meta["scheduled_mono_ns"] = scheduled_mono_ns
            meta["request_rate"] = point.rate.request_rate
        body = turn_body(self.spec, s.model, prompt, history or [], s.engine_extra, s.plan_extra)
        assert self.builder is not None  # open_clients ran
        return meta, build_request(self.builder, self.url, body, s.headers)

    async def dispatch(
        self, prepared: tuple[dict[str, Any], httpx.Request], w: int, text_out: list[str] | None = None
    ) -> None:
        """A prepared request on worker ``w``'s connection, recorded when it ends."""
        meta, request = prepared
        client = await self.client_of(w)
        rec = await stream_completion(
            client,
            request,  # a retry builds its request again from it
            {**meta, "worker": self.share.worker_offset + w},
            request_timeout_s=self.settings.request_timeout_s,
            clock=self.clock,
            on_chunk=self.listeners.on_chunk,
            text_out=text_out,
        )
        self.record(rec)

    def start_tasks(self) -> list[asyncio.Task[None]]:
        """The point's sending tasks: a rate point's one open loop, else one per closed-loop worker."""
        assert self.out.start is not None
        if self.point.rate is None:
            return [asyncio.create_task(self.worker(w)) for w in range(self.n_workers)]
        share = self.share
        t0 = share.start_mono_ns if share.start_mono_ns is not None else self.out.start.mono_ns
        cap = self.point.concurrency if share.workers is None else share.workers
        return [asyncio.create_task(self.open_loop(t0, cap))]

    async def wait(self, tasks: list[asyncio.Task[None]]) -> None:
        """Until every task ended, or the abort: in-flight streams then get a short grace to end by
        themselves (a dead server fails them at once), and are cancelled after it; each cancelled request
        still leaves its partial record."""
        abort_wait = asyncio.create_task(self.abort.event.wait())
        try:
            pending: set[asyncio.Task[Any]] = set(tasks)
            while pending:
                done, pending = await asyncio.wait(
                    pending | {abort_wait}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(abort_wait)
                if abort_wait in done:
                    if pending:
                        _, pending = await asyncio.wait(pending, timeout=self.abort.grace_s)
                    break
                for t in done:
                    t.result()  # a bug in a worker must surface, not vanish
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            abort_wait.cancel()

    async def open_loop(self, t0_mono_ns: int, cap: int) -> None:
        """A rate point's sends: request ``i`` of ``todo`` at ``t0_mono_ns + offsets[i]`` on the monotonic
        clock, whatever the earlier ones are doing, each on an idle worker's connection (a new worker when
        none is idle). With ``cap`` > 0 at most that many are in flight: a request due while the cap is full
        waits for a slot (it is sent late, and its record shows by how much). Ends when every request sent
        has ended, or earlier sends stop (abort, ``out.stopped``).

        Everything of a send that does not depend on its moment is done before the wait: the request is built
        (``prepare``: record identity, body encoded) and, when no worker is idle, the next worker's client is
        made; at the due time only the worker is picked and the send task started, and this loop yields at
        once so that task takes its send stamp before the next request is prepared."""
        slots = asyncio.Semaphore(cap) if cap else None
        idle: list[int] = []
        inflight: set[asyncio.Task] = set()
        n_workers = 0

        async def one(prepared: Any, w: int) -> None:
            try:
                await self.dispatch(prepared, w)
            finally:
                idle.append(w)
                if slots is not None:
                    slots.release()

        try:
            for i in self.todo:
                due = t0_mono_ns + self.offsets[i]
                prepared = self.prepare(i, due)
                if not idle:
                    await self.client_of(n_workers)  # the client a new worker would send on, made ahead
                await _until(self.clock, due)
                if slots is not None:
                    await slots.acquire()
                if self.abort.is_set or self.out.stopped:
                    break
                if idle:
                    w = idle.pop()
                else:
                    w, n_workers = n_workers, n_workers + 1
                self.out.sent += 1
                task = asyncio.create_task(one(prepared, w))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                await asyncio.sleep(0)  # the send task runs (and stamps its send) before the next prepare
            while inflight:
                done, _ = await asyncio.wait(set(inflight))
                for t in done:
                    t.result()  # a bug in a send must surface, not vanish
        finally:
            for t in inflight:
                t.cancel()
            await asyncio.gather(*inflight, return_exceptions=True)


TIMER_SLACK_NS = 1_500_000  # the last stretch before a send's due time is waited by yielding, not by a timer


async def _until(clock: Clock, due: int) -> None:
    """Until the monotonic clock says ``due``. The event loop's timer wakes up to 1 ms late (epoll waits whole
    milliseconds, rounded up): sleep to within TIMER_SLACK_NS of the due time, then yield to the loop (which
    keeps reading the streams) until it is due."""
    while (now := clock.mono_ns()) < due:
        left = due - now
        await asyncio.sleep((left - TIMER_SLACK_NS) / 1e9 if left > TIMER_SLACK_NS else 0)


async def run_point(
    point: PointPlan,
    settings: LoadSettings,
    listeners: Listeners,
    abort: Abort,
    *,
    clock: Clock = SYSTEM_CLOCK,
    transport: httpx.AsyncBaseTransport | None = None,
    probe: LagProbe | None = None,
    share: ShardShare | None = None,
) -> PointOutcome:
    """One point's load in this process: its closed loop, or a rate point's open loop (``_PointLoad``). A
    shard (``run_load``) sends only its ``share`` of the point (default: all of it)."""
    load = _PointLoad(point, settings, listeners, abort, clock, share or ShardShare())
    out = load.out
    # The point's garbage is young: everything older is frozen out of the collector's reach, so a full
    # collection during the load does not walk every record of the run so far (a pause on every stream).
    gc.collect()
    gc.freeze()
    cpu0, wall0 = time.process_time_ns(), time.monotonic_ns()
    probe = probe or LagProbe(clock=clock)
    out.probe = probe
    async with load.clients:
        await load.open_clients(transport)
        out.start = stamp(clock)
        probe.start()
        try:
            await load.wait(load.start_tasks())
        finally:
            await probe.stop()
            out.end = stamp(clock)
            out.cpu_ns, out.wall_ns = time.process_time_ns() - cpu0, time.monotonic_ns() - wall0
    gc.unfreeze()
    out.aborted = abort.reason
    return out


MIN_ENDED_FOR_ERROR_RATE = 10  # max_error_rate is judged once this many requests of the point ended


def _check_error_rate(point: PointPlan, out: PointOutcome) -> None:
    """A rate point's ``max_error_rate`` stop condition: once ``MIN_ENDED_FOR_ERROR_RATE`` requests ended,
    failed ÷ ended above the limit stops its sending (``out.stopped``; the ones in flight still end). A
    shard judges its own requests (every n-th of the point: the same mix)."""
    lim = point.rate.max_error_rate if point.rate is not None else None
    if lim is None or out.stopped or out.finished < MIN_ENDED_FOR_ERROR_RATE:
        return
    failed = out.finished - out.ok
    if failed / out.finished > lim:
        out.stopped = f"max_error_rate {lim:g} exceeded: {failed} of {out.finished} requests failed"


# ------------------------------------------------------------------------------------------------- shards

# Streams per load-client process. Measured (issue #13, a quiet 16-core machine, the metronome's bursts:
# every stream's token at one instant): one loop with 64 streams reads the burst's last chunk 10 ms late
# (p99), 16 per loop keep it to 2.2 ms at 64 and 128 streams; a loop handles a burst chunk after chunk.
SHARD_MIN_STREAMS = 16
SHARD_START_LEAD_NS = 50_000_000  # a sharded rate point's schedule starts this long after the shards' "go"


def shards_for(setting: int, concurrency: int, cores: int | None = None) -> int:
    """Load-client processes for a point: the plan's ``load.shards`` when set (at most one per stream), else
    one per ``SHARD_MIN_STREAMS`` streams, at most one per core this process may run on. A rate point passes
    its ``max_concurrency``: without one (0) its streams in flight are not known before it runs, so it runs
    in one process (set ``max_concurrency`` to spread a high rate over shards)."""
    if setting:
        return max(1, min(setting, concurrency))
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, min(cores, concurrency // SHARD_MIN_STREAMS))


def _split(point: PointPlan, n: int, k: int, turns: int = 1) -> tuple[list[int], int, int]:
    """Shard k of n: its request indices (every n-th; with multi-turn ``turns``, every n-th conversation's
    requests), its workers and the number of its first worker."""
    base, extra = divmod(point.concurrency, n)
    workers = base + (k < extra)
    first = k * base + min(k, extra)
    if turns > 1:
        return (
            [c * turns + t for c in range(k, point.requests // turns, n) for t in range(turns)],
            workers,
            first,
        )
    return list(range(k, point.requests, n)), workers, first


@dataclass(frozen=True)
class _ShardJob:
    """What a shard process is given: shard ``k`` of ``n`` of ``point``, sent with ``settings``; its live
    warning when its loop runs ``warn_ns`` late."""

    point: PointPlan
    settings: LoadSettings
    k: int
    n: int
    warn_ns: int | None


def _shard_main(conn: Any, job: _ShardJob, go: Any, stop: Any, grace: Any, t0: Any) -> None:
    """A shard's process: its own event loop runs its part of the point; every record goes back over the
    pipe as the request ends, then the shard's probe and CPU. Waits for ``go`` so all shards start
    together; a rate point's schedule starts at ``t0`` (CLOCK_MONOTONIC is one clock for every process of
    the host, so every shard sends its every n-th request of the one schedule on time)."""
    # Ctrl-C and a hang-up reach the terminal's whole process group: the collector decides and relays its
    # abort through ``stop``; a shard dying of them would print a traceback and lose its records in flight
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    gc.collect()
    run_on(job.settings.loop, _shard_load(conn, job, go, stop, grace, t0))
    conn.close()


async def _shard_load(conn: Any, job: _ShardJob, go: Any, stop: Any, grace: Any, t0: Any) -> None:
    """The shard's load on its own event loop; the parent's abort reaches it within 50 ms."""
    abort = Abort()
    indices, workers, offset = _split(job.point, job.n, job.k, job.settings.workload.turns)
    probe = LagProbe(warn_ns=job.warn_ns, on_late=lambda lag_ns: conn.send(("late", lag_ns)))

    async def watch() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.05)
        abort.set("stopped by the collector", grace.value)

    watcher = asyncio.create_task(watch())
    conn.send(("ready", None))
    await asyncio.to_thread(go.wait)
    share = ShardShare(indices, workers, offset, t0.value)
    listeners = Listeners(sink=lambda r: conn.send(("rec", r.to_obj())))
    out = await run_point(job.point, job.settings, listeners, abort, probe=probe, share=share)
    watcher.cancel()
    conn.send(
        (
            "end",
            {
                "sent": out.sent,
                "probe": _probe_obj(probe, out, job.k),
                "aborted": out.aborted,
                "stopped": out.stopped,
            },
        )
    )


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (the shards' semaphores) with SIGHUP ignored, which it keeps
    across its exec: it sits in the terminal's process group, and killed by a hang-up it is relaunched empty
    and prints a KeyError traceback for every semaphore released after (it ignores SIGINT and SIGTERM by
    itself)."""
    if threading.current_thread() is not threading.main_thread():
        resource_tracker.ensure_running()
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        resource_tracker.ensure_running()
    finally:
        signal.signal(signal.SIGHUP, previous)


def _probe_obj(probe: LagProbe, out: PointOutcome, shard: int) -> dict[str, Any]:
    """A shard's self-observations, as the ``client_probe`` event carries them."""
    return {
        "shard": shard,
        "period_ns": probe.period_ns,
        "due_mono_ns": probe.due_mono_ns.tolist(),
        "lag_ns": probe.lag_ns.tolist(),
        "cpu_ns": out.cpu_ns,
        "wall_ns": out.wall_ns,
    }


def deliver(listeners: Listeners, tally: _Tally, rec: RequestRecord) -> None:
    """A shard's record on the collector's side (a process's or a Ray actor's): written, counted, heard
    (its tokens at once: a shard does not report chunk by chunk)."""
    listeners.sink(rec)
    tally.add(rec)
    if listeners.on_chunk is not None:
        listeners.on_chunk(sum(rec.chunk_tokens))
    if listeners.on_request is not None:
        listeners.on_request(rec)


class _Shards:
    """A point over shard processes (``run_load``): their pipes read on this event loop as records arrive."""

    def __init__(
        self,
        point: PointPlan,
        shards: int,
        listeners: Listeners,
        abort: Abort,
        on_late: Callable[[int], None] | None,
    ):
        self.n, self.listeners, self.abort, self.on_late = shards, listeners, abort, on_late
        self.out = PointOutcome(point.point_id)
        self.out.probes = []
        self.tally = _Tally(self.out, abort, max(3, point.concurrency))
        self.ready = self.ended = 0
        self.loop = asyncio.get_running_loop()
        self.all_ready: asyncio.Future[None] = self.loop.create_future()
        self.all_ended: asyncio.Future[None] = self.loop.create_future()

    def receive(self, rx: Any) -> None:
        """Every message waiting on shard pipe ``rx``; its end (or death) stops reading it."""
        try:
            while rx.poll():
                what, obj = rx.recv()
                if what == "rec":
                    self._record(RequestRecord.from_obj(obj))
                elif what == "ready":
                    self.ready += 1
                    if self.ready == self.n and not self.all_ready.done():
                        self.all_ready.set_result(None)
                elif what == "late" and self.on_late is not None:
                    self.on_late(obj)
                elif what == "end":
                    self.out.sent += obj["sent"]
                    self.out.stopped = self.out.stopped or obj["stopped"]
                    self.out.probes.append(obj["probe"])
                    raise EOFError
        except (EOFError, OSError):
            self._ended(rx)

    def _record(self, rec: RequestRecord) -> None:
        deliver(self.listeners, self.tally, rec)

    def _ended(self, rx: Any) -> None:
        self.loop.remove_reader(rx.fileno())
        self.ended += 1
        if self.ended == self.n and not self.all_ended.done():
            self.all_ended.set_result(None)
        if not self.all_ready.done() and self.ended:
            self.all_ready.set_result(None)  # a shard died before it was ready: the point ends below


async def run_load(
    point: PointPlan,
    settings: LoadSettings,
    listeners: Listeners,
    abort: Abort,
    *,
    shards: int,
    on_late: Callable[[int], None] | None = None,
    warn_ns: int | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> PointOutcome:
    """One point over ``shards`` processes (``run_point`` in this one when 1). Each shard runs its own event
    loop with its share of the workers and of the request indices; this process writes every record as it
    arrives (``listeners.sink``), so requests.jsonl is one stream on the one CLOCK_MONOTONIC of the host.
    The outcome's ``probes`` hold one ``client_probe`` observation per shard."""
    if shards <= 1:
        probe = LagProbe(warn_ns=warn_ns, on_late=on_late, clock=clock)
        out = await run_point(point, settings, listeners, abort, clock=clock, probe=probe)
        out.probes = [_probe_obj(probe, out, 0)]
        return out
    mp = multiprocessing.get_context("spawn")  # no fork of a process with threads (sampler, server watcher)
    _start_resource_tracker()
    go, stop, grace, t0 = mp.Event(), mp.Event(), mp.Value("d", 0.0), mp.Value("q", 0)
    state = _Shards(point, shards, listeners, abort, on_late)
    procs, conns = [], []
    for k in range(shards):
        rx, tx = mp.Pipe(duplex=False)
        job = _ShardJob(point, settings, k, shards, warn_ns)
        p = mp.Process(target=_shard_main, args=(tx, job, go, stop, grace, t0), daemon=True)
        p.start()
        tx.close()
        procs.append(p)
        conns.append(rx)
    for rx in conns:
        state.loop.add_reader(rx.fileno(), state.receive, rx)

    async def relay_abort() -> None:
        await abort.event.wait()
        grace.value = abort.grace_s
        stop.set()

    relay = asyncio.create_task(relay_abort())
    out = state.out
    try:
        await state.all_ready
        out.start = stamp(clock)
        # a rate point's schedule starts a little after "go": a shard's thread wakes and sets up its clients
        t0.value = out.start.mono_ns + SHARD_START_LEAD_NS
        go.set()
        await state.all_ended
    finally:
        stop.set()
        relay.cancel()
        await _close_shards(procs, conns, state.loop)
        out.end = stamp(clock)
    dead = [p.exitcode for p in procs if p.exitcode not in (0, None)]
    if dead and not abort.is_set:
        abort.set(f"a load-client shard exited with code {dead[0]}")
    out.aborted = abort.reason
    return out


async def _close_shards(procs: list[Any], conns: list[Any], loop: asyncio.AbstractEventLoop) -> None:
    """Join every shard process (killed after 10 s) and close its pipe."""
    for p in procs:
        await asyncio.to_thread(p.join, 10)
        if p.is_alive():
            p.kill()
    for rx in conns:
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(rx.fileno())
        rx.close()
