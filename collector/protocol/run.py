"""``collector run PLAN.toml``: the whole measurement protocol into one new raw run.

Order (each step writes before the next starts): store → plan copy → prediction.json → fingerprint/ →
server (log streamed into server.log) → start-up checks → sampler → phases and points (requests.jsonl,
per-point checks) → stop sampler and server → seal. raw/ gets observations only: each point's summary in
vllm bench serve's schema stays in the result (``RunResult.vllm_bench``, for ``--save-result``).

Before any of it, ``collector.protocol.preflight`` checks what can be checked without a run folder (paths,
port,
vocabulary, lengths, engine flags): a plan that cannot work leaves nothing in raw/.

Faults never lose data: every request that ended is already on disk (appended as it ended); a dead server,
Ctrl-C/SIGTERM/SIGHUP (collector.protocol.interrupts), an unreachable server or a point whose every request
failed
aborts the point (its in-flight requests are recorded as cut or aborted), the server's process group is
stopped, and the run is sealed with status ``failed`` and the reason. Every request to the server has a
total deadline (collector.protocol.bounded_http; a streamed request its request_timeout_s), so none of this
waits on
a server that trickles. A write that fails (disk full) aborts the same way from whichever thread
hit it; if even the seal cannot be written the run stays unsealed — never something that looks complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import json
import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import httpx
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from analysis.core import metrics
from collector.protocol import bounded_http, fingerprint, ray_backend, workload
from collector.protocol import checks as ck
from collector.protocol.clock import SYSTEM_CLOCK, Clock, stamp
from collector.protocol.eventloop import client_stack, run_on
from collector.protocol.interrupts import Interrupted, Interrupts
from collector.protocol.loadgen import (
    Abort,
    Listeners,
    LoadSettings,
    PointOutcome,
    resolve_rate_point,
    run_load,
    shards_for,
)
from collector.protocol.preflight import check_values, preflight
from collector.protocol.sampler import (
    Sampler,
    ScrapeOptions,
    ScrapeWriter,
    nvidia_smi_available,
    query_nvidia_smi,
    scrape_metrics,
    scrape_metrics_async,
)
from collector.protocol.server import ServerProcess, server_env
from collector.protocol.theory_sheet import SheetInputs, theory_sheet
from collector.raw.errors import AnatomyError, RunError, StoreError
from collector.raw.plan import Plan, PointPlan, load_plan
from collector.raw.prediction import PredictedTheory, PredictionDoc, PredictionInputs
from collector.raw.records import EVENT_KINDS, CheckResult, EventRecord, RequestRecord, ScrapeRecord
from collector.raw.secrets import scrub, scrub_obj
from collector.raw.store import RawStore, Run, Stream

RUN_KIND = "collector-run"


class EventWriter:
    """``events.jsonl`` writer shared by the load loop, the sampler thread and the server watcher."""

    def __init__(
        self,
        stream: Any,
        clock: Clock,
        echo: Callable[[str], None] | None = None,
        on_error: Callable[[OSError], None] | None = None,
    ):
        self._stream, self._clock, self._echo, self._on_error = stream, clock, echo, on_error
        self._lock = threading.Lock()
        self.count: dict[str, int] = {}
        self.failed = False
        self.closed = False

    def close(self) -> None:
        """After ``run_end``: a sampler thread still finishing a scrape adds no event to a sealed run."""
        with self._lock:
            self.closed = True

    def emit(self, kind: str, **fields: Any) -> None:
        """Append one event. A failed write (disk full) goes to ``on_error`` (which aborts the run), never up
        into the thread that emitted: the server watcher and the sampler must not die of it. After a failed
        write nothing more is appended, so a line cut by the full disk stays the file's (torn) last line."""
        if kind not in EVENT_KINDS:  # a kind the contract does not know would make the run unreadable
            raise ValueError(f"event kind {kind!r} is not in collector.raw.records.EVENT_KINDS")
        t = stamp(self._clock)
        with self._lock:
            if self.failed or self.closed:
                return
            try:
                self._stream.write_json(EventRecord(kind, t.mono_ns, t.unix_ns, fields).to_obj())
            except OSError as err:
                if self._on_error is None:
                    raise
                self.failed = True
                self._on_error(err)
                return
            self.count[kind] = self.count.get(kind, 0) + 1
        if self._echo is not None and kind in (
            "fault",
            "abort",
            "metrics_unreachable",
            "metrics_back",
            "metrics_bounded",
            "server_exit",
        ):
            self._echo(f"[{kind}] " + json.dumps(fields, ensure_ascii=False))


@dataclass(frozen=True)
class PointRow:
    """One line of the end-of-run summary, computed by analysis.core.metrics (the one definition)."""

    point: str
    kind: str
    ok: int
    failed: int
    output_tok_s: float | None
    ttft_p50_ms: float | None
    itl_p50_ms: float | None
    first_error: str | None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    goodput_req_s: float | None = None  # against the plan's [slo]; None without one
    # the load client's own self-check (analysis.core.metrics.client_saturated over every shard's loop lag)
    client_lag_p99_ms: float | None = None
    client_saturated: bool | None = None


@dataclass
class RunResult:
    path: Path
    status: str
    reason: str | None
    points_done: int
    points_planned: int
    checks_failed: list[str] = field(default_factory=list)
    failed_checks: list[CheckResult] = field(default_factory=list)
    points: list[PointRow] = field(default_factory=list)
    # each point's summary in `vllm bench serve`'s schema (analysis.core.metrics.point_summary_vllm_bench),
    # for
    # ``--save-result``: a copy for people, kept out of raw/ (the store holds observations, not derivations)
    vllm_bench: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __str__(self) -> str:
        head = f"{self.path}: {self.status}, {self.points_done}/{self.points_planned} points"
        if self.reason:
            head += f" ({self.reason})"
        if self.checks_failed:
            head += f"; {len(self.checks_failed)} checks failed: " + ", ".join(self.checks_failed[:8])
        return head


class _Live:
    """The rich progress display: one bar per point (requests done, tokens/s, errors)."""

    def __init__(self, console: Console):
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[tok_s]:>8.0f} tok/s"),
            TextColumn("err {task.fields[errors]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task: TaskID | None = None
        self.tokens = 0
        self.errors = 0
        self.t0 = 0.0

    def start_point(self, pt: PointPlan) -> None:
        self.tokens, self.errors = 0, 0
        self.t0 = SYSTEM_CLOCK.mono_ns()
        load = f"c={pt.concurrency}" if pt.rate is None else f"rate={pt.rate.request_rate:g}/s"
        desc = f"{pt.phase} {load} in={pt.input_len} out={pt.output_len}"
        self.task = self.progress.add_task(desc, total=pt.requests, tok_s=0.0, errors=0)

    def chunk(self, n: int) -> None:
        self.tokens += n

    def request(self, rec: RequestRecord) -> None:
        self.errors += rec.error_kind is not None
        dt = (SYSTEM_CLOCK.mono_ns() - self.t0) / 1e9
        if self.task is None:
            return
        self.progress.update(
            self.task, advance=1, tok_s=self.tokens / dt if dt > 0 else 0.0, errors=self.errors
        )


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {
            f.name: _jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != "raw_text"
        }
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _flag_int(args: Sequence[str], *names: str) -> int | None:
    value = ck.flag_value(args, *names)
    return int(value) if value is not None and value.isdigit() else None


def write_prediction(run: Run, plan: Plan) -> PredictionDoc:
    """Theory for this model/GPU/flags from ``collector plan``'s library, written before any request
    (through the raw contract's schema, ``collector.raw.prediction``)."""
    m = plan.model
    llamacpp = plan.server.engine == "llamacpp"
    inputs = PredictionInputs(
        model=m.config,
        gpu=m.gpu,
        kv_pool_gib=m.kv_pool_gib,
        max_model_len=m.max_model_len,
        kv_dtype=m.kv_dtype,
        weight_format=m.weight_format,
        block_size=m.block_size,
        llama_cpp_ctx_total=_flag_int(plan.server.args, "-c", "--ctx-size") if llamacpp else None,
        llama_cpp_slots=_flag_int(plan.server.args, "-np", "--parallel") if llamacpp else None,
    )
    try:
        data = theory_sheet(SheetInputs(**dataclasses.asdict(inputs)))
    except AnatomyError as err:
        doc = PredictionDoc(inputs, None, str(err))
    else:  # checked as the file will hold it: a key the sheet gains without the schema fails the run here
        theory = PredictedTheory.from_dict(
            json.loads(json.dumps(data)), "collector.protocol.theory_sheet.theory_sheet"
        )
        doc = PredictionDoc(inputs, theory, None)
    run.write_json("prediction.json", doc.to_dict(), source="collector.protocol.theory_sheet.theory_sheet")
    if Path(
        m.config
    ).is_file():  # a config.json path (not a bundled name): keep the exact file beside the theory
        run.copy_file("model-config.json", Path(m.config))
    return doc


def _get_json(url: str, headers: dict[str, str] | None = None) -> tuple[int | None, Any]:
    """(status, the body as JSON, else as text) of one bounded GET; (None, the error) when it failed."""
    try:
        with httpx.Client(headers=headers) as client:
            status, text = bounded_http.get(client, url)
    except httpx.HTTPError as err:
        return None, f"{type(err).__name__}: {err}"
    try:
        return status, json.loads(text)
    except (ValueError, RecursionError):
        return status, text


class _Protocol:
    """State of one run while it executes; ``execute_run`` drives it."""

    def __init__(
        self,
        plan: Plan,
        run: Run,
        console: Console,
        clock: Clock,
        spec: workload.WorkloadSpec,
        api_key: str | None,
        secrets: list[str],
        interrupts: Interrupts,
    ):
        self.plan, self.run, self.console, self.clock = plan, run, console, clock
        self.interrupts = interrupts
        # what the requests send (collector.protocol.workload); the headers (API key) go to every request and
        # scrape
        self.spec, self.secrets = spec, secrets
        self.headers = workload.request_headers(api_key, plan.load.headers)
        self.io_error: str | None = None  # the first failed write to the raw store (disk full)
        self.streams: list[Stream] = []
        self.events = EventWriter(
            self._stream("events.jsonl"),
            clock,
            echo=lambda s: console.print(scrub(s, secrets), markup=False),
            on_error=lambda err: self.io_fault(err, "events.jsonl"),
        )
        self.requests = self._stream("requests.jsonl")
        self.requests_failed = False
        self.scrapes = ScrapeWriter(
            self._stream("scrapes.jsonl"),
            on_error=lambda err: self.io_fault(err, "scrapes.jsonl"),
            on_bounded=self._metrics_bounded,
        )
        self.server: ServerProcess | None = None
        self.sampler: Sampler | None = None
        self.abort: Abort | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending_abort: str | None = None  # a fault before the event loop exists
        self.current_point: str | None = None
        self.points_done = 0
        self.checks_failed: list[str] = []
        self.failed_checks: list[CheckResult] = []
        self.rows: list[PointRow] = []
        self.vllm_bench: dict[str, dict[str, Any]] = {}
        self.ray: ray_backend.RayCluster | None = None  # [load] backend = "ray": the cluster's connection

    @property
    def live_server(self) -> ServerProcess:
        """The server, which every step after ``start_server`` has."""
        if self.server is None:
            raise RuntimeError("collector bug: a step that needs the server ran before start_server")
        return self.server

    @property
    def live_abort(self) -> Abort:
        """The load's abort, which every step inside ``phases`` has."""
        if self.abort is None:
            raise RuntimeError("collector bug: a step of the load ran outside phases()")
        return self.abort

    def _stream(self, rel: str) -> Stream:
        s = self.run.open_stream(rel)
        self.streams.append(s)
        return s

    # -- faults from other threads / signals --------------------------------------------------------
    def fault(self, reason: str, grace_s: float = 0.0) -> None:
        if self.abort is not None and self.loop is not None:
            self.loop.call_soon_threadsafe(self.abort.set, reason, grace_s)
        elif self.pending_abort is None:
            self.pending_abort = reason

    def io_fault(self, err: OSError, rel: str | None = None) -> None:
        """A write to the raw store failed (any thread): the run stops, failed, with the reason."""
        if self.io_error is None:
            self.io_error = io_reason(err, self.run.path / rel if rel else None)
            self.fault(self.io_error)

    def on_server_exit(self, code: int) -> None:
        where = f" during point {self.current_point}" if self.current_point else ""
        self.events.emit("server_exit", code=code, expected=False)
        self.fault(f"server exited with code {code}{where}", grace_s=5.0)

    # -- steps ---------------------------------------------------------------------------------------
    def record_check(self, c: CheckResult, echo: bool = True) -> None:
        self.events.emit("check", **c.event_fields())
        if c.ok is False:
            self.checks_failed.append(f"{c.point or 'startup'}:{c.name}")
            self.failed_checks.append(c)
        if not echo:
            return
        style = {True: "green", False: "red", None: "dim"}[c.ok]
        mark = {True: "PASS", False: "FAIL", None: "n/a "}[c.ok]
        self.console.print(
            f"[{style}]{mark}[/] {c.scope} {c.point or ''} {c.name}: {escape(scrub(c.detail, self.secrets))}",
            highlight=False,
            soft_wrap=True,
        )

    def fingerprint(self) -> None:
        sp = self.plan.server
        server = self.live_server
        for name, text in fingerprint.collect(
            server.adapter, sp, server.command, server_env(sp), self.secrets
        ).items():
            self.run.write_text(f"fingerprint/{name}", text, source="collector.protocol.fingerprint")

    def start_server(self) -> None:
        sp = self.plan.server
        log_stream = None if sp.attach else self._stream("server.log")
        self.server = ServerProcess(
            sp,
            log_stream,
            self.on_server_exit,
            log_path=None if sp.attach else self.run.path / "server.log",
            on_log_error=lambda err: self.io_fault(err, "server.log"),
            run_path=self.run.path,
        )
        self.fingerprint()
        self.events.emit(
            "server_start",
            mode="attach" if sp.attach else "start",
            url=sp.base_url,
            argv=fingerprint.redact_args(self.server.command) if self.server.command else None,
        )
        self.server.start()
        head = f"waiting for {sp.base_url}/health (up to {sp.startup_timeout_s:.0f} s)"
        self.console.print(head)
        # vLLM's start-up is minutes without a word on the terminal: a spinner shows the log's last line.
        with self.console.status(head) as spinner:

            def show(waited_s: float) -> None:
                last = self.live_server.last_log_line
                last = last if len(last) <= 100 else last[:99] + "…"
                spinner.update(f"{head}: {waited_s:.0f} s  [dim]{escape(last)}[/]")

            waited = self.server.wait_healthy(
                sp.startup_timeout_s, abort=lambda: self.pending_abort, on_poll=show
            )
        self.events.emit("server_healthy", waited_s=waited)
        self.record_check(ck.check_health(waited, sp.base_url))
        if not sp.attach:
            facts = self.server.check_identity()
            self.record_check(
                CheckResult(
                    "startup",
                    "server_identity",
                    facts.get("ours"),
                    f"port {sp.port}: listener pids {facts.get('listener_pids')}, "
                    f"started server pid {facts.get('pid')}",
                    facts=facts,
                )
            )

    def server_facts(self) -> str | None:
        """Verbatim answers of the server's info endpoints (into fingerprint/), then the start-up checks."""
        sp = self.plan.server
        paths = ["/v1/models", "/version"] + (["/props"] if sp.engine == "llamacpp" else [])
        answers = {p: self._info_json(p) for p in paths}
        rec = self._boundary_scrape("startup", None) if self.plan.sampling.metrics else None
        # only a 200's body is /metrics text: a gateway without /metrics answers 404 (its check says so, n/a)
        metrics_text = rec.text if rec is not None and rec.ok else None
        if rec is not None:
            self.record_check(ck.check_metrics_format(metrics_text, rec.url or "/metrics"))
            busy = ck.requests_in_flight(metrics_text, sp.engine)
            if busy:  # before our first request: another client's, and every number would be shared
                raise RunError(
                    f"{sp.base_url}: another client is using the server: {busy} request(s) in flight before "
                    "the first point (its /metrics says so); stop it, or measure another server"
                )
        log_path = None if sp.attach else self.run.path / "server.log"
        identity = ck.check_engine_identity(sp.engine, metrics_text)
        self.record_check(identity)
        facts = identity.facts or {}
        engine = facts.get("checked_as")  # None: an OpenAI-compatible server we have no checks for
        if engine == "vllm":
            self.record_check(ck.check_pool_vllm(log_path, metrics_text))
        elif engine == "llamacpp":  # an "openai" server whose /metrics say llama.cpp: ask its /props too
            props = answers["/props"] if "/props" in answers else self._info_json("/props")
            self.record_check(ck.check_pool_llamacpp(log_path, props if isinstance(props, dict) else None))
        else:
            self.record_check(ck.check_skipped("kv_pool", facts.get("metrics_engine")))
        self.record_check(ck.check_prefix_cache(sp, log_path))
        self.record_check(ck.check_greedy(self.plan.load.extra_body))
        self.record_check(ck.check_sampling_overrides(sp.engine, log_path))
        return metrics_text

    def _info_json(self, path: str) -> Any:
        """One info endpoint's JSON body (None when it did not answer), kept verbatim in fingerprint/."""
        status, body = _get_json(self.plan.server.base_url + path, self.headers)
        self.run.write_json(
            f"fingerprint/server{path.replace('/', '-')}.json", {"status": status, "body": body}
        )
        return body

    def _boundary_scrape(self, tag: str, point: str | None) -> ScrapeRecord:
        """The start-up scrape, on the main thread before the load (a signal there unwinds it)."""
        with httpx.Client(headers=self.headers) as c:
            url, bound = f"{self.plan.server.base_url}/metrics", self.plan.sampling.scrape_stored_max_bytes
            rec = scrape_metrics(c, url, self.clock, tag=tag, point=point, stored_max_bytes=bound)
        self.scrapes.write(rec)
        return rec

    async def _point_scrape(self, tag: str, point: str) -> ScrapeRecord | None:
        """A point-boundary scrape on the event loop (``bounded_http.DEADLINE_S`` in all), given up — None,
        nothing written — when the run aborts meanwhile: a slow /metrics must not hold a signal up."""
        async with httpx.AsyncClient(headers=self.headers) as c:
            url = f"{self.plan.server.base_url}/metrics"
            bound = self.plan.sampling.scrape_stored_max_bytes
            scrape = asyncio.ensure_future(
                scrape_metrics_async(c, url, self.clock, tag=tag, point=point, stored_max_bytes=bound)
            )
            aborted = asyncio.ensure_future(self.live_abort.event.wait())
            await asyncio.wait({scrape, aborted}, return_when=asyncio.FIRST_COMPLETED)
            aborted.cancel()
            if not scrape.done():
                scrape.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scrape
                return None
            rec = scrape.result()
        self.scrapes.write(rec)
        return rec

    def start_sampler(self) -> None:
        s = self.plan.sampling
        gpu = s.nvidia_smi == "on" or (s.nvidia_smi == "auto" and nvidia_smi_available())
        if gpu:
            self.scrapes.write(query_nvidia_smi(self.clock, tag="startup"))
        self.sampler = Sampler(
            self.plan.server.base_url,
            s.interval_s,
            self.scrapes,
            self.events.emit,
            metrics=s.metrics,
            nvidia_smi=gpu,
            clock=self.clock,
            scrape=ScrapeOptions(self.headers, s.scrape_stored_max_bytes),
        )
        self.sampler.start()

    async def phases(self) -> None:
        self.loop = loop = asyncio.get_running_loop()
        self.abort = abort = Abort()
        if self.pending_abort:
            abort.set(self.pending_abort)

        def on_signal(name: str) -> None:
            loop.call_soon_threadsafe(self._on_signal, name)

        # a signal (collector.protocol.interrupts) now aborts the load on the loop instead of unwinding the
        # stack
        self.interrupts.on_signal = on_signal
        self.events.emit("client_stack", **client_stack(self.plan.load.transport))
        try:
            self.connect_load_backend()
            live = _Live(self.console)
            with live.progress:
                for phase in self.plan.phases:
                    if abort.is_set:
                        break
                    self.events.emit("phase_start", phase=phase.name, phase_kind=phase.kind)
                    for pt in phase.points:
                        if abort.is_set:
                            break
                        await self.point(pt, live)
                        await self._drain(abort)
                    self.events.emit(
                        "phase_end", phase=phase.name, phase_kind=phase.kind, aborted=abort.reason
                    )
        finally:
            self.interrupts.on_signal = None

    async def _drain(self, abort: Abort) -> None:
        """The plan's pause between points (``[load] drain_s``), cut short by an abort."""
        if abort.is_set or self.plan.load.drain_s <= 0:
            return
        self.events.emit("drain", seconds=self.plan.load.drain_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(abort.event.wait(), self.plan.load.drain_s)

    def _on_signal(self, name: str) -> None:
        where = f" during point {self.current_point}" if self.current_point else ""
        self.live_abort.set(f"interrupted by {name}{where}")

    async def point(self, pt: PointPlan, live: _Live) -> None:
        p = self.plan
        pt, _schedule = resolve_rate_point(pt)  # a rate point: requests = the number its schedule sends
        self.current_point = pt.point_id
        rate = {} if pt.rate is None else {"rate": dataclasses.asdict(pt.rate)}
        self.events.emit(
            "point_start",
            point=pt.point_id,
            phase=pt.phase,
            phase_kind=pt.kind,
            concurrency=pt.concurrency,
            requests=pt.requests,
            input_len=pt.input_len,
            output_len=pt.output_len,
            seed=pt.seed,
            **rate,
        )
        before = await self._point_scrape("point_start", pt.point_id) if p.sampling.metrics else None
        offset = os.fstat(self.requests.fileno()).st_size  # where this point's requests.jsonl lines begin
        live.start_point(pt)
        out = await self._load(pt, live)
        records = point_records(self.run.path / "requests.jsonl", offset, pt.point_id)
        # an aborted point is not measured: no end scrape to wait for (a signal ends the run now)
        after = None
        if p.sampling.metrics and (self.live_server.alive or p.server.attach) and not self.live_abort.is_set:
            after = await self._point_scrape("point_end", pt.point_id)
        self._end_point(pt, out, records)
        scraped = (before.text if before else None, after.text if after else None)
        checks = ck.point_checks(
            pt, records, out.sent, p.server.engine, *scraped, prefix_cache=p.server.prefix_cache
        )
        for c in checks:
            self.record_check(c, echo=False)
        self.console.print(checks_line(pt.point_id, checks), highlight=False, soft_wrap=True)
        if not out.aborted:
            self.points_done += 1
        self.current_point = None

    def _keep_request(self, rec: RequestRecord) -> None:
        """A request that ended: appended to requests.jsonl, and not kept in memory (an hour-long open-loop
        point is hundreds of thousands of them: the point's summary reads them back from the file at its
        end, ``point_records``)."""
        if self.requests_failed:
            return  # after a failed write only the torn last line may be incomplete
        try:
            self.requests.write_json(rec.to_obj())
        except OSError as err:
            self.requests_failed = True
            self.io_fault(err, "requests.jsonl")

    def _metrics_bounded(self, rec: ScrapeRecord) -> None:
        """The run's first /metrics page larger than its stored bound: said once (event and terminal)."""
        stored = len(rec.text.encode()) if rec.text else 0
        self.events.emit(
            "metrics_bounded",
            url=rec.url,
            tag=rec.tag,
            received_bytes=stored + (rec.dropped_bytes or 0),
            stored_bytes=stored,
            dropped_series=rec.dropped_series,
            bound_bytes=self.plan.sampling.scrape_stored_max_bytes,
        )

    def _client_late(self, point_id: str, lag_ns: int) -> None:
        """The live warning of a point whose load client set the pace (its loop-lag probe fired)."""
        self.console.print(
            f"[yellow]client saturated[/] in {point_id}: its event loop ran {lag_ns / 1e6:.1f} ms "
            f"late (> {metrics.CLIENT_LOOP_LAG_LIMIT_MS:g} ms on more than 1 % of wake-ups): the "
            "client, not the server, is setting the pace of this point",
            highlight=False,
        )

    def connect_load_backend(self) -> None:
        """``[load] backend = "ray"``: the cluster joined before the first point (``load_backend`` event)."""
        if self.plan.load.backend == "ray":
            address = ray_backend.address_of(self.plan, os.environ) or "auto"  # check_plan: one is given
            self.ray = ray_backend.RayCluster(address, self.events.emit).connect()

    def load_settings(self) -> LoadSettings:
        """Where the requests go and what they carry besides each prompt (the same for every point)."""
        p, sp = self.plan, self.plan.server
        return LoadSettings(
            base_url=sp.base_url,
            model=sp.served_model_name,
            token_id_range=(p.model.token_id_low, p.model.token_id_high),
            engine_extra=self.live_server.adapter.request_extra(sp.prefix_cache),
            plan_extra=p.load.extra_body,
            request_timeout_s=p.load.request_timeout_s,
            read_timeout_s=p.load.read_timeout_s,
            workload=self.spec,
            headers=self.headers,
            loop=p.load.loop,
            transport=p.load.transport,
        )

    async def _load(self, pt: PointPlan, live: _Live) -> PointOutcome:
        """The point's load (collector.protocol.loadgen), its client probes as events; a server that died
        during it
        is named as the abort's cause."""
        cores = self.ray.cpus if self.ray is not None else None  # on Ray: the cluster's CPUs
        shards = shards_for(self.plan.load.shards, pt.concurrency, cores)
        listeners = Listeners(sink=self._keep_request, on_request=live.request, on_chunk=live.chunk)
        late = functools.partial(self._client_late, pt.point_id)
        warn_ns = round(metrics.CLIENT_LOOP_LAG_LIMIT_MS * metrics.NS_PER_MS)
        out = await (run_load if self.ray is None else self.ray.run_load)(
            pt,
            self.load_settings(),
            listeners,
            self.live_abort,
            shards=shards,
            clock=self.clock,
            on_late=late,
            warn_ns=warn_ns,
        )
        for probe in out.probes:
            self.events.emit("client_probe", point=pt.point_id, shards=shards, **probe)
        proc = self.live_server.proc
        if out.aborted and proc is not None and not self.interrupts.received:
            # Connection errors can outrun the watcher thread's notice; a dead server is the root cause.
            try:
                code = proc.wait(timeout=2.0)
                out.aborted = f"server exited with code {code} during point {pt.point_id}"
                self.live_abort.reason = out.aborted
            except subprocess.TimeoutExpired:
                pass
        return out

    def _end_point(self, pt: PointPlan, out: PointOutcome, records: list[RequestRecord]) -> None:
        """The point's end: a point whose every request failed aborts the run; ``point_end``; its summary."""
        if not out.aborted and out.sent and not out.ok:
            # Nothing this point measured: every later point would fail the same way (token ids past the
            # vocabulary get HTTP 400 each), so the run stops here with the first cause.
            out.aborted = (
                f"point {pt.point_id}: all {out.sent} requests failed (first: {first_error(records)})"
            )
            self.live_abort.set(out.aborted)
        if out.aborted:
            self.events.emit("abort", reason=out.aborted, point=pt.point_id)
        stopped = {} if pt.rate is None else {"stopped": out.stopped}  # a rate point's stop condition
        self.events.emit(
            "point_end",
            point=pt.point_id,
            sent=out.sent,
            finished=out.finished,
            ok=out.ok,
            errors=dict(out.errors),
            aborted=out.aborted,
            **stopped,
        )
        if records:
            self.vllm_bench[pt.point_id] = vllm_bench_summary(pt, records, self.plan.server.served_model_name)
            lag = [x for probe in out.probes for x in (probe.get("lag_ns") or [])]
            self.rows.append(point_row(pt, records, lag, self.plan.slo))

    def stop(self) -> None:
        if self.sampler is not None:  # after a signal, a scrape in flight is not waited for
            self.sampler.stop(wait_s=0.5 if self.interrupts.received else None)
        self.scrapes.close()  # a sampler thread past its join time writes nothing after the seal
        if self.ray is not None:
            self.ray.close()
        if self.server is not None and self.server.proc is not None:
            was_running = self.server.proc.poll() is None
            code = self.server.stop(hurry=lambda: self.interrupts.hurry)
            if was_running:
                self.events.emit("server_exit", code=code, expected=True)


class _ScrubbedFile:
    """The terminal a run prints to, with the run's secrets scrubbed from every write (the places that
    print server text scrub it before rich wraps the line too: a key split by a line break is not found
    here)."""

    def __init__(self, file: Any, secrets: Sequence[str]):
        self._file, self._secrets = file, secrets

    def write(self, text: str) -> int:
        return self._file.write(scrub(text, self._secrets))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def _scrubbed(result: RunResult, secrets: Sequence[str]) -> RunResult:
    """The result as the command line prints it (the reason, a point's first error, a failed check's detail
    can quote a server's reply), the run's secrets scrubbed."""
    if not secrets:
        return result
    return dataclasses.replace(
        result,
        reason=scrub(result.reason, secrets) if result.reason else result.reason,
        failed_checks=[dataclasses.replace(c, detail=scrub(c.detail, secrets)) for c in result.failed_checks],
        points=[
            dataclasses.replace(r, first_error=scrub(r.first_error, secrets) if r.first_error else None)
            for r in result.points
        ],
        vllm_bench={p: scrub_obj(doc, secrets) for p, doc in result.vllm_bench.items()},
    )


def io_reason(err: OSError, path: Path | None = None) -> str:
    """A failed write as one line: ``disk full: <file>: No space left on device`` (the file from the error,
    else the stream being written)."""
    what = "disk full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else "cannot write the raw store"
    name = err.filename or path
    return f"{what}: {f'{name}: ' if name else ''}{err.strerror or err}"


def point_records(path: Path, offset: int, point_id: str) -> list[RequestRecord]:
    """The point's requests as written to ``path`` from byte ``offset`` on (where the point began): the
    point's summary and checks, read back at its end. A line cut by a failed write (disk full: the run is
    failing already) ends the list."""
    out: list[RequestRecord] = []
    with open(path, "rb") as fh:
        fh.seek(offset)
        for line in fh:
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                break
            if obj.get("point") == point_id:
                out.append(RequestRecord.from_obj(obj, path))
    return out


def first_error(records: Sequence[RequestRecord]) -> str:
    """The first failed request's error, one line (``HTTP 400: {"error": …}``), clipped."""
    failed = sorted((r for r in records if not r.ok), key=lambda r: r.end_mono_ns)
    if not failed:
        return "no failed request"
    msg = " ".join((failed[0].error_message or failed[0].error_kind or "").split())
    return msg if len(msg) <= 200 else msg[:199] + "…"


def vllm_bench_summary(pt: PointPlan, records: Sequence[RequestRecord], model_id: str) -> dict[str, Any]:
    """One point in `vllm bench serve`'s result schema and by its definitions (analysis.core.metrics'
    vllm-bench-compatible view: the collector defines no statistic)."""
    return metrics.point_summary_vllm_bench(
        records,
        model_id=model_id,
        max_concurrency=pt.concurrency or None,
        num_prompts=pt.requests,
        request_rate=pt.rate.request_rate if pt.rate else "inf",
        burstiness=pt.rate.burstiness if pt.rate else 1.0,
        label=f"inference-anatomy collector: {pt.point_id} ({metrics.VLLM_BENCH})",
    )


@dataclass(frozen=True)
class Verdict:
    """What the run's own checks (``collector.protocol.checks.POINT_EXCLUDING``/``STARTUP_EXCLUDING``, the
    client's
    saturation) say of its measured points: the one source of the run's exit status."""

    measured: int  # points other than warm-up
    left_out: dict[str, str]  # each point not usable: why, and what to change
    unusable: str | None  # why no measured point is usable (the first reason); None when some point is

    @property
    def status(self) -> str:
        """``usable`` (every measured point), ``partial`` (some left out) or ``unusable`` (none usable)."""
        return "unusable" if self.unusable else "partial" if self.left_out else "usable"


def _left_out(result: RunResult) -> dict[str, str]:
    """The measured points a failed own check excludes, or whose load client set the pace
    (``analysis.core.metrics.client_saturated``), each with why and what to change; in run order."""
    out: dict[str, str] = {}
    for c in result.failed_checks:
        if c.point is not None and c.name in ck.POINT_EXCLUDING:
            out.setdefault(c.point, f"{c.name}: {c.detail}")
    for r in result.points:
        if r.kind != "warmup" and r.client_saturated:
            lag = (
                f"event-loop lag p99 {r.client_lag_p99_ms:.1f} ms" if r.client_lag_p99_ms is not None else ""
            )
            why = f"client saturated ({lag}): {ck.CLIENT_FIX}"
            out[r.point] = f"{out[r.point]}; {why}" if r.point in out else why
    return {p: out[p] for p in (r.point for r in result.points) if p in out}


def verdict(result: RunResult) -> Verdict:
    """The run's verdict from its own checks: which measured points are left out and why, and whether none is
    usable — a failed start-up check that excludes them all, or each measured point left out."""
    measured = [r for r in result.points if r.kind != "warmup"]
    left_out = _left_out(result)
    for c in result.failed_checks:
        if c.point is None and c.name in ck.STARTUP_EXCLUDING:
            return Verdict(len(measured), left_out, f"start-up check {c.name} failed: {c.detail}")
    unusable = None
    if measured and all(r.point in left_out for r in measured):
        row = measured[0]
        cause = f"; first failed request: {row.first_error}" if row.first_error else ""
        first = f"{row.point}: {left_out[row.point]}{cause}"
        unusable = f"every measured point fails a gate that excludes it (first: {first})"
    return Verdict(len(measured), left_out, unusable)


def point_row(
    pt: PointPlan,
    records: Sequence[RequestRecord],
    lag_ns: Sequence[int] = (),
    slos_ms: dict[str, float] | None = None,
) -> PointRow:
    """The summary line of one point: every number from analysis.core.metrics (canonical view)."""
    r = metrics.point_result(records, pt.point_id)
    lat = r.latency
    good = metrics.goodput_req_s(metrics.good_requests(records, slos_ms), r.duration_s) if slos_ms else None
    return PointRow(
        point=pt.point_id,
        kind=pt.kind,
        ok=r.completed,
        failed=r.failed or 0,
        output_tok_s=r.output_throughput_tok_s if r.completed else None,
        ttft_p50_ms=lat["ttft"].median_ms,
        itl_p50_ms=lat["itl"].median_ms,
        first_error=first_error(records) if r.failed else None,
        ttft_p99_ms=lat["ttft"].percentiles_ms.get(99.0),
        tpot_p50_ms=lat["tpot"].median_ms,
        tpot_p99_ms=lat["tpot"].percentiles_ms.get(99.0),
        itl_p99_ms=lat["itl"].percentiles_ms.get(99.0),
        goodput_req_s=good,
        client_lag_p99_ms=metrics.client_loop_lag_p99_ms(lag_ns),
        client_saturated=metrics.client_saturated(lag_ns),
    )


SUMMARY_COLUMNS = (
    "point",
    "ok",
    "failed",
    "output tok/s",
    "TTFT p50/p99 ms",
    "TPOT p50/p99 ms",
    "ITL p50/p99 ms",
)


def summary_table(rows: Sequence[PointRow]) -> Table:
    """Per point: requests ok/failed, output tok/s, TTFT, TPOT and ITL at p50 and p99, goodput when the plan
    states SLOs (analysis.core.metrics' canonical view); the point id is never cut."""

    def num(v: float | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    def pair(a: float | None, b: float | None, fmt: str) -> str:
        return f"{num(a, fmt)} / {num(b, fmt)}"

    t = Table(title="points measured", title_justify="left")
    goodput = any(r.goodput_req_s is not None for r in rows)
    for col in SUMMARY_COLUMNS + (("goodput req/s",) if goodput else ()):
        t.add_column(col, justify="left" if col == "point" else "right", no_wrap=col == "point")
    for r in rows:
        cells = [
            r.point,
            str(r.ok),
            f"[red]{r.failed}[/]" if r.failed else "0",
            num(r.output_tok_s, ".1f"),
            pair(r.ttft_p50_ms, r.ttft_p99_ms, ".1f"),
            pair(r.tpot_p50_ms, r.tpot_p99_ms, ".2f"),
            pair(r.itl_p50_ms, r.itl_p99_ms, ".2f"),
        ]
        t.add_row(*cells, *((num(r.goodput_req_s, ".2f"),) if goodput else ()))
    return t


def checks_line(point: str, checks: Sequence[CheckResult]) -> str:
    """A point's self-checks: one line counting them, then one line per failure with its detail (the
    start-up checks' format: ``FAIL point <id> <name>: <detail>``)."""
    passed = sum(1 for c in checks if c.ok)
    na = sum(1 for c in checks if c.ok is None)
    failed = [c for c in checks if c.ok is False]
    head = (
        f"checks {point}: {passed} pass"
        + (f", {na} n/a" if na else "")
        + (f", {len(failed)} FAIL" if failed else "")
    )
    lines = [f"[{'red' if failed else 'green'}]{escape(head)}[/]"]
    lines += [f"[red]FAIL[/] point {c.point or point} {c.name}: {escape(c.detail)}" for c in failed]
    return "\n".join(lines)


def _close_quietly(streams: Sequence[Stream], run: Run) -> None:
    """Close every stream and the journal after a failed seal (disk full): Stream.close() flushes first, which
    fails again on a full disk and leaves the file open; closing the file object itself still closes its
    descriptor (its own flush error is dropped: the data it held cannot be written anyway)."""
    for s in streams:
        try:
            s.close()
        except OSError:
            fh = getattr(s, "_fh", None)
            if fh is not None:
                try:
                    fh.close()
                except OSError:
                    pass
    try:
        run.close_unsealed()
    except (OSError, ValueError):
        pass


@dataclass
class _Opened:
    """A run that passed every check before the load and has its folder: what the protocol starts from."""

    plan: Plan
    plan_file: Path
    spec: workload.WorkloadSpec
    api_key: str | None
    secrets: list[str]
    console: Console
    run: Run
    name: str
    server_mode: str


def _open(plan_file: Path, raw_root: Path, console: Console) -> _Opened:
    """The plan read and checked (values, API key, workload files, pre-flight: nothing is written before
    these pass), the console scrubbed of the run's secrets, then the run's folder in the store."""
    plan = load_plan(plan_file)
    ray_backend.check_plan(plan, plan_file, os.environ)  # Ray installed and a cluster named, when asked for
    check_values(plan)  # numbers in range before the workload is built from them (a 2^70 token id)
    # the API key and the workload's files (dataset, tokenizer) are checked before anything is written
    api_key = workload.api_key(plan.load.api_key_env, os.environ)
    spec = workload.spec_from_plan(plan)
    workload.validate(spec, plan.model.token_id_low, plan.model.token_id_high)
    secrets = fingerprint.plan_secrets(api_key, plan.load.headers, plan.server)
    if secrets:  # a server's reply quoting the key reaches the screen too (abort reasons, log lines)
        console.file = cast(IO[str], _ScrubbedFile(console.file, secrets))  # it passes the rest through
    pf = preflight(plan, Path(raw_root))  # nothing is written before this passes
    for note in pf.notes:
        console.print(f"pre-flight: {note}", markup=False, highlight=False)
    store = RawStore(raw_root)
    name = store.unique_run_name(plan.campaign, plan.run_name)
    sp = plan.server
    meta = {
        "engine": sp.engine,
        "server_mode": "attach" if sp.attach else "start",
        "plan_file": str(plan_file),
        "model": plan.model.config,
        "gpu": plan.model.gpu,
        "description": plan.description,
    }
    try:
        run = store.create_run(plan.campaign, name, kind=RUN_KIND, meta=meta, secrets=tuple(secrets))
    except OSError as err:
        where = Path(raw_root) / plan.campaign / name
        raise RunError(f"{where}: cannot create the run folder ({io_reason(err)})") from err
    console.print(f"run {run.path}")
    return _Opened(plan, plan_file, spec, api_key, secrets, console, run, name, meta["server_mode"])


def _measure(
    o: _Opened, clock: Clock, interrupts: Interrupts
) -> tuple[_Protocol | None, str | None, Exception | None]:
    """The protocol from the plan's copy to the last point: (its state, why it failed or None, a collector
    bug to raise once the run is sealed). Every fault becomes the reason; none escapes before the seal."""
    proto: _Protocol | None = None
    reason, crash = None, None
    try:
        o.run.copy_file("plan.toml", o.plan_file)  # a literal secret in it is scrubbed by the store
        proto = _Protocol(o.plan, o.run, o.console, clock, o.spec, o.api_key, o.secrets, interrupts)
        proto.events.emit(
            "run_start",
            plan=str(o.plan_file),
            campaign=o.plan.campaign,
            run=o.name,
            server_mode=o.server_mode,
        )
        write_prediction(o.run, o.plan)
        proto.start_server()
        proto.server_facts()
        proto.start_sampler()
        run_on(o.plan.load.loop, proto.phases())
        reason = proto.abort.reason if proto.abort else None
    except AnatomyError as err:
        reason = str(err)
    except OSError as err:  # a write on the main thread failed (disk full)
        reason = io_reason(err)
    except Interrupted as sig:
        where = (
            f" during point {proto.current_point}" if proto and proto.current_point else " before the load"
        )
        reason = f"interrupted by {sig.name}{where}"
    except Exception as err:  # a collector bug: still stop the server and seal what was observed
        reason, crash = f"collector error: {type(err).__name__}: {err}", err
    return proto, reason, crash


def _with_io_error(reason: str | None, io_error: str | None) -> str | None:
    """The run's reason with the store's failed write added (once)."""
    if io_error is None or (reason is not None and io_error in reason):
        return reason
    return io_error if reason is None else f"{reason}; {io_error}"


def _stop_and_seal(
    o: _Opened, proto: _Protocol | None, reason: str | None, interrupts: Interrupts
) -> tuple[str, str | None, str | None]:
    """Stop the sampler and the server, write ``run_end`` and seal the run: (status, reason, why the seal
    failed or None: the run then stays visibly unsealed)."""
    seal_error = None
    status = "failed"
    try:
        if proto is not None:
            proto.stop()
    finally:
        reason = _with_io_error(reason, proto.io_error if proto else None)
        status = "failed" if reason else "complete"
        checks_failed = proto.checks_failed if proto else []
        if proto is not None:
            proto.events.emit("run_end", status=status, reason=reason, checks_failed=checks_failed)
            proto.events.close()
            if proto.io_error and proto.io_error not in (reason or ""):  # run_end itself could not be written
                reason = _with_io_error(reason, proto.io_error)
                status = "failed"
        try:
            o.run.seal(
                status,
                note=reason,
                extra={
                    "plan": _jsonable(o.plan),
                    "checks_failed": checks_failed,
                    "points_done": proto.points_done if proto else 0,
                    "points_planned": len(o.plan.points),
                },
            )
        except (OSError, StoreError) as err:
            seal_error = io_reason(err) if isinstance(err, OSError) else str(err)
            _close_quietly(proto.streams if proto else [], o.run)
        interrupts.restore()
    return status, reason, seal_error


def execute_run(
    plan_file: Path, raw_root: Path, clock: Clock = SYSTEM_CLOCK, console: Console | None = None
) -> RunResult:
    """Measure a server by ``plan_file`` into a new sealed run under ``raw_root`` (the module's steps); a run
    that failed is sealed ``failed`` and raised as RunError with the result's line."""
    o = _open(plan_file, raw_root, console or Console(stderr=True))
    interrupts = Interrupts(on_hangup=lambda: setattr(o.console, "quiet", True))  # its terminal went away
    interrupts.install()
    proto, reason, crash = _measure(o, clock, interrupts)
    status, reason, seal_error = _stop_and_seal(o, proto, reason, interrupts)
    if proto is not None and proto.rows:
        o.console.print(summary_table(proto.rows))
    if crash is not None:
        raise crash
    result = _scrubbed(
        RunResult(
            o.run.path,
            "failed" if seal_error else status,
            reason,
            proto.points_done if proto else 0,
            len(o.plan.points),
            proto.checks_failed if proto else [],
            proto.failed_checks if proto else [],
            proto.rows if proto else [],
            proto.vllm_bench if proto else {},
        ),
        o.secrets,
    )
    if seal_error:
        raise RunError(f"{result}; not sealed ({seal_error}): the run stays visibly interrupted")
    if status == "failed":
        raise RunError(str(result))
    return result
