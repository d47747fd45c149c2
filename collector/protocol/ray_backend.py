"""``[load] backend = "ray"``: a point's load shards as Ray actors spread over a cluster's nodes, for a load
that needs more client cores than one host holds. Everything else is the local backend's
(collector.protocol.loadgen): the driver (the ``collector run`` process) resolves the point and its arrival
schedule once and gives shard ``k`` of ``n`` the same share a local shard process gets (``_split``); each
actor runs ``run_point`` on its own event loop.

Clocks: a local shard shares CLOCK_MONOTONIC with the collector; an actor on another node does not. Before
each point the driver measures every actor's offset by ``SYNC_ROUNDS`` round trips (NTP's estimate: the
actor's clock read at the round trip's midpoint; the best round trip's, with half its length as the
uncertainty) and records them (``shard_clock`` events); every record is shifted onto the driver's clocks
before it is written, so requests.jsonl is one stream on one clock exactly as with local shards, and a rate
point's schedule start is handed to each actor on its own clock.

A shard whose actor or node died is recorded (``shard_lost``: which requests came back without a record)
and ends the run after the point, as a local shard process that exited does; every wait on the cluster has
a timeout, so a node that vanishes never hangs the run.

Ray is an optional extra (``pip install 'inference-anatomy[ray]'``): this is the only module that imports
it, and only once a plan asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.protocol.clock import SYSTEM_CLOCK, Clock, stamp
from collector.protocol.eventloop import run_on
from collector.protocol.loadgen import (
    Abort,
    LagProbe,
    Listeners,
    LoadSettings,
    PointOutcome,
    ShardShare,
    _probe_obj,
    _split,
    _Tally,
    deliver,
    resolve_rate_point,
    run_point,
)
from collector.raw.errors import PlanError, RunError
from collector.raw.plan import Plan, PointPlan
from collector.raw.records import RequestRecord

SYNC_ROUNDS = 16  # round trips per actor and point; the shortest one's midpoint is the offset estimate
POLL_S = 0.1  # how often the driver collects the records the actors hold
CALL_TIMEOUT_S = 30.0  # a call to an actor that answers nothing within this long: its shard is lost
PLACE_TIMEOUT_S = 60.0  # the cluster must find a CPU for every shard within this long
RAY_START_LEAD_NS = 300_000_000  # a rate point's schedule starts this long after the driver says go
SHARD_CPUS = 1  # each shard actor holds one CPU of its node (one event loop keeps one core busy)

Emit = Callable[..., None]


def check_plan(plan: Plan, plan_file: Path, environ: Mapping[str, str]) -> None:
    """A plan with ``backend = "ray"``: Ray installed and a cluster address given, else one line naming the
    plan and the fix (PlanError)."""
    if plan.load.backend != "ray":
        return
    if importlib.util.find_spec("ray") is None:
        raise PlanError(
            f'{plan_file}: [load].backend: "ray" needs Ray, which is not installed here: '
            "pip install 'inference-anatomy[ray]' (or pip install 'ray>=2.40')"
        )
    if address_of(plan, environ) is None:
        raise PlanError(
            f'{plan_file}: [load].ray_address: missing: backend = "ray" needs the cluster\'s address '
            '(ray_address = "HOST:6379" or "auto" in [load], or the RAY_ADDRESS environment variable)'
        )


def address_of(plan: Plan, environ: Mapping[str, str]) -> str | None:
    """The Ray cluster's address: the plan's ``[load] ray_address``, else ``RAY_ADDRESS``."""
    return plan.load.ray_address or environ.get("RAY_ADDRESS") or None


@dataclass(frozen=True)
class ClockSync:
    """One actor's clocks against the driver's: every round trip's length (ns), and from the shortest one
    the offsets driver − actor (monotonic and wall clock, ns) and their uncertainty (half its length)."""

    round_trip_ns: list[int]
    offset_ns: int
    unix_offset_ns: int
    uncertainty_ns: int


def clock_sync(samples: list[tuple[int, int, int, int]]) -> ClockSync:
    """NTP's estimate from round trips ``(driver mono before, actor mono, actor unix, driver mono after)``
    (the driver's wall clock is its monotonic one plus a constant the caller folds into ``actor unix``):
    offset = the round trip's midpoint − the actor's reading, from the shortest round trip (the one least
    delayed on either leg); the true offset is within ± half its length."""
    rtts = [t1 - t0 for t0, _, _, t1 in samples]
    t0, mono, unix, t1 = samples[rtts.index(min(rtts))]
    mid = (t0 + t1) // 2
    return ClockSync(rtts, mid - mono, mid - unix, (t1 - t0) // 2)


def shifted(obj: dict[str, Any], sync: ClockSync) -> dict[str, Any]:
    """A request record from an actor with its times moved onto the driver's clocks (every ``*_mono_ns``
    by the monotonic offset, every ``*_unix_ns`` by the wall-clock one)."""
    out = dict(obj)
    for key, v in obj.items():
        off = sync.offset_ns if key.endswith("_mono_ns") else sync.unix_offset_ns
        if not key.endswith(("_mono_ns", "_unix_ns")) or v is None:
            continue
        out[key] = [t + off for t in v] if isinstance(v, list) else v + off
    return out


# ------------------------------------------------------------------------------------------------ the actor


@dataclass(frozen=True)
class _RayJob:
    """What a shard actor is given: shard ``k`` of ``n`` of ``point`` (its schedule ``offsets_ns`` as the
    driver computed it, starting at ``start_mono_ns`` on the actor's clock), sent with ``settings``."""

    point: PointPlan
    settings: LoadSettings
    k: int
    n: int
    warn_ns: int | None
    start_mono_ns: int | None
    offsets_ns: list[int] | None


class ShardActor:
    """One load shard on a node of the cluster (made a threaded Ray actor by ``RayCluster``): ``run`` sends
    its share of the point on an event loop of its own (the plan's ``[load] loop``, as a local shard's),
    while the driver collects the records as they end (``drain``), reads its clocks (``clocks``) and relays
    an abort (``stop``) from the actor's other threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # the records and lags, appended on the loop and taken by ``drain``
        self.records: list[dict[str, Any]] = []
        self.late: list[int] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.abort: Abort | None = None
        self.stop_grace_s: float | None = None

    def where(self) -> dict[str, Any]:
        import ray  # the actor's process: Ray is there

        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address(), "pid": os.getpid()}

    def clocks(self) -> tuple[int, int]:
        return time.monotonic_ns(), time.time_ns()

    def run(self, job: _RayJob) -> dict[str, Any]:
        return run_on(job.settings.loop, _shard_run(self, job))

    def keep(self, into: list[Any], item: Any) -> None:
        with self.lock:
            into.append(item)

    def drain(self) -> tuple[list[dict[str, Any]], list[int]]:
        with self.lock:
            records, late = self.records, self.late
            self.records, self.late = [], []
        return records, late

    def stop(self, grace_s: float) -> None:
        self.stop_grace_s = grace_s
        loop, abort = self.loop, self.abort
        if loop is not None and abort is not None:
            loop.call_soon_threadsafe(abort.set, "stopped by the collector", grace_s)


async def _shard_run(actor: ShardActor, job: _RayJob) -> dict[str, Any]:
    """The shard's part of the point on its loop (a function, not a method: an ``async def`` on the class
    would make Ray run every method on one event loop of its own, where ``run_on`` cannot start another)."""
    abort = actor.abort = Abort()
    actor.loop = asyncio.get_running_loop()
    if actor.stop_grace_s is not None:
        abort.set("stopped by the collector", actor.stop_grace_s)
    indices, workers, first = _split(job.point, job.n, job.k, job.settings.workload.turns)
    share = ShardShare(indices, workers, first, job.start_mono_ns, job.offsets_ns)
    probe = LagProbe(warn_ns=job.warn_ns, on_late=lambda lag_ns: actor.keep(actor.late, lag_ns))
    listeners = Listeners(sink=lambda r: actor.keep(actor.records, r.to_obj()))
    out = await run_point(job.point, job.settings, listeners, abort, probe=probe, share=share)
    actor.loop, actor.stop_grace_s = None, None  # the actor serves the next point afresh
    return {"sent": out.sent, "probe": _probe_obj(probe, out, job.k), "stopped": out.stopped}


# ------------------------------------------------------------------------------------------------ the driver


async def _get(ref: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    """An ObjectRef's value on this event loop, or TimeoutError after ``timeout_s``."""
    return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)


@dataclass
class _Shard:
    """The driver's view of one shard actor during a point."""

    k: int
    actor: Any
    where: dict[str, Any]
    sync: ClockSync
    indices: list[int]
    received: set[int] = field(default_factory=set)
    run: Any = None  # the actor's ``run`` call: an asyncio future
    done: bool = False
    lost: bool = False


def _ended(s: _Shard, out: PointOutcome, end: dict[str, Any]) -> dict[str, Any]:
    """A shard's end counted into the point; its ``client_probe`` observation on the driver's clock."""
    out.sent += end["sent"]
    out.stopped = out.stopped or end["stopped"]
    s.done = True
    probe = end["probe"]
    probe["due_mono_ns"] = [t + s.sync.offset_ns for t in probe["due_mono_ns"]]
    return probe


def _first_line(err: BaseException) -> str:
    """An exception as one line: its type and its message's first line (Ray's carry a traceback; an error
    raised in the actor is named by its cause)."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and cause is not err:
        return f"{type(err).__name__}: {_first_line(cause)}"
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


class RayCluster:
    """The driver's connection to a Ray cluster for one run: ``connect`` (records ``load_backend``), then
    ``run_load`` per point, ``close`` at the run's end."""

    def __init__(self, address: str, emit: Emit):
        self.address, self.emit = address, emit
        self.nodes = self.cpus = 0
        self.ray: Any = None
        self.actor_class: Any = None
        # the shard actors, kept from point to point while their number stays (a worker process starts in
        # seconds on a busy node): their placement group, each actor and where it runs
        self.fleet: tuple[Any, list[tuple[Any, dict[str, Any]]]] | None = None

    def connect(self) -> RayCluster:
        try:
            import ray
        except ImportError as err:  # check_plan said it is there; a broken install is named, not raised
            raise RunError(f'[load] backend = "ray": cannot import ray ({err})') from err
        # ray.init puts its own SIGTERM handler (sys.exit) in place of the run's (collector.protocol
        # .interrupts, which stops and seals the run): the run's is put back
        previous = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise RunError(
                f'[load] backend = "ray": cannot connect to the Ray cluster at {self.address}: {err}'
            ) from err
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, previous)
        self.ray = ray
        self.actor_class = ray.remote(num_cpus=SHARD_CPUS, max_restarts=0)(ShardActor)
        self.nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        self.cpus = int(ray.cluster_resources().get("CPU", 0))
        self.emit(
            "load_backend",
            backend="ray",
            ray_version=ray.__version__,
            address=self.address,
            nodes=self.nodes,
            cpus=self.cpus,
        )
        return self

    def close(self) -> None:
        self._release()
        if self.ray is not None:
            with contextlib.suppress(Exception):  # the run is ending: a cluster already gone changes nothing
                self.ray.shutdown()
            self.ray = None

    async def run_load(
        self,
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
        """One point over ``shards`` actors spread over the nodes (loadgen.run_load's contract): every record
        written as it comes back (``listeners.sink``) on the driver's clocks; ``probes`` one per shard."""
        point, offsets = resolve_rate_point(point)  # the schedule, computed once here
        out = PointOutcome(point.point_id)
        tally = _Tally(out, abort, max(3, point.concurrency))
        actors = await self._actors(shards)
        fleet: list[_Shard] = []
        try:
            for k, (actor, where) in enumerate(actors):
                fleet.append(
                    await self._shard(point, actor, where, k, shards, settings.workload.turns, clock)
                )
            out.start = stamp(clock)
            t0 = out.start.mono_ns + RAY_START_LEAD_NS if point.rate is not None else None
            for s in fleet:
                start = None if t0 is None else t0 - s.sync.offset_ns  # on the actor's clock
                job = _RayJob(point, settings, s.k, shards, warn_ns, start, offsets or None)
                s.run = asyncio.wrap_future(s.actor.run.remote(job).future())
            relay = asyncio.create_task(self._relay_abort(abort, fleet))
            try:
                await self._collect(fleet, point, out, lambda r: deliver(listeners, tally, r), on_late)
            finally:
                relay.cancel()
            out.end = stamp(clock)
        except BaseException:
            self._release()  # an actor in an unknown state is not used again
            raise
        if any(s.lost for s in fleet):
            self._release()
        if any(s.lost for s in fleet) and not abort.is_set:
            abort.set(f"a load-client shard on Ray was lost during point {point.point_id} (see shard_lost)")
        out.aborted = abort.reason
        return out

    async def _place(self, shards: int) -> Any:
        """A placement group of one CPU per shard, spread over the nodes (SPREAD: at most one bundle a node
        while nodes last); RunError when the cluster cannot hold it within PLACE_TIMEOUT_S."""
        from ray.util.placement_group import placement_group, remove_placement_group

        pg = placement_group([{"CPU": SHARD_CPUS}] * shards, strategy="SPREAD")
        try:
            await _get(pg.ready(), PLACE_TIMEOUT_S)
        except TimeoutError:
            remove_placement_group(pg)
            raise RunError(
                f'[load] backend = "ray": the cluster at {self.address} cannot place {shards} load shards of '
                f"{SHARD_CPUS} CPU each within {PLACE_TIMEOUT_S:g} s ({self.nodes} nodes, {self.cpus} CPUs): "
                "lower [load] shards or add nodes"
            ) from None
        return pg

    async def _actors(self, n: int) -> list[tuple[Any, dict[str, Any]]]:
        """``n`` shard actors, one per bundle of a spread placement group, each with where it runs: the last
        point's when it had ``n`` too; RunError when one does not start."""
        if self.fleet is not None and len(self.fleet[1]) == n:
            return self.fleet[1]
        self._release()
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        pg = await self._place(n)
        self.fleet = (pg, [])
        for k in range(n):
            strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=k)
            # threaded: ``run`` holds a thread for the point; ``drain``, ``clocks``, ``stop`` run beside it
            actor = self.actor_class.options(scheduling_strategy=strategy, max_concurrency=4).remote()
            try:
                where = await _get(actor.where.remote(), PLACE_TIMEOUT_S)  # its process started
            except Exception as err:  # it did not start (RayActorError) or does not answer
                with contextlib.suppress(Exception):  # already gone: the RunError below says why
                    self.ray.kill(actor)
                self._release()
                raise RunError(
                    f'[load] backend = "ray": load shard {k} did not start on {self.address}: '
                    f"{_first_line(err)}"
                ) from None
            self.fleet[1].append((actor, where))
        return self.fleet[1]

    async def _shard(
        self, point: PointPlan, actor: Any, where: dict[str, Any], k: int, n: int, turns: int, clock: Clock
    ) -> _Shard:
        """Shard ``k``'s clocks against the driver's (``shard_clock``) before the point; an actor that does
        not answer is a lost shard before the load (RunError)."""
        samples = []
        wall = clock.unix_ns() - clock.mono_ns()  # the driver's wall clock as its monotonic one + this
        try:
            for _ in range(SYNC_ROUNDS):
                t0 = clock.mono_ns()
                mono, unix = await _get(actor.clocks.remote())
                samples.append((t0, mono, unix - wall, clock.mono_ns()))
        except Exception as err:  # its process died between points, or it hangs
            raise RunError(
                f'[load] backend = "ray": load shard {k} on {where.get("node_ip")} does not answer: '
                f"{_first_line(err)}"
            ) from None
        sync = clock_sync(samples)
        self.emit(
            "shard_clock",
            point=point.point_id,
            shard=k,
            shards=n,
            **where,
            round_trip_ns=sync.round_trip_ns,
            offset_ns=sync.offset_ns,
            unix_offset_ns=sync.unix_offset_ns,
            uncertainty_ns=sync.uncertainty_ns,
        )
        return _Shard(k, actor, where, sync, _split(point, n, k, turns)[0])

    async def _collect(
        self,
        fleet: list[_Shard],
        point: PointPlan,
        out: PointOutcome,
        record: Callable[[RequestRecord], None],
        on_late: Callable[[int], None] | None,
    ) -> None:
        """Until every shard ended or was lost: the records they hold, every ``POLL_S``."""
        out.probes = []
        while live := [s for s in fleet if not s.done]:
            await asyncio.wait([s.run for s in live], timeout=POLL_S)
            for s in live:
                try:
                    ended = s.run.done()
                    records, late = await _get(s.actor.drain.remote())
                    for obj in records:
                        s.received.add(obj["index"])
                        record(RequestRecord.from_obj(shifted(obj, s.sync)))
                    for lag in late:
                        if on_late is not None:
                            on_late(lag)
                    if ended:
                        out.probes.append(_ended(s, out, s.run.result()))
                except Exception as err:  # the actor died (RayActorError), its node went, or it hung
                    self._lost(s, point, out, err)

    def _lost(self, s: _Shard, point: PointPlan, out: PointOutcome, err: BaseException) -> None:
        """A shard whose actor is gone: ``shard_lost`` names its requests that left no record."""
        lost = [f"{point.point_id}-r{i:05d}" for i in s.indices if i not in s.received]
        self.emit(
            "shard_lost",
            point=point.point_id,
            shard=s.k,
            node_id=s.where.get("node_id"),
            node_ip=s.where.get("node_ip"),
            reason=_first_line(err),
            received=len(s.received),
            lost_request_ids=lost,
        )
        out.sent += len(s.received)  # what is known to have been sent; the rest is in lost_request_ids
        s.done = s.lost = True
        if s.run is not None and s.run.done() and not s.run.cancelled():
            s.run.exception()  # retrieved: asyncio does not log it again

    async def _relay_abort(self, abort: Abort, fleet: list[_Shard]) -> None:
        await abort.event.wait()
        for s in fleet:
            if not s.done:
                s.actor.stop.remote(abort.grace_s)

    def _release(self) -> None:
        """The shard actors and their placement group ended (the next point makes new ones)."""
        if self.fleet is None:
            return
        from ray.util.placement_group import remove_placement_group

        pg, actors = self.fleet
        self.fleet = None
        for actor, _ in actors:
            with contextlib.suppress(Exception):  # already dead
                self.ray.kill(actor)
        with contextlib.suppress(Exception):
            remove_placement_group(pg)
