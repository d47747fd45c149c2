"""The sampler: every interval, the server's raw ``/metrics`` text (and ``nvidia-smi`` query output when there
is a GPU), appended verbatim with both clocks to ``scrapes.jsonl`` (one ``collector.raw.records.ScrapeRecord``
a line).

It runs in its own thread with its own HTTP client, so a slow scrape never delays the load client's event loop
and a busy event loop never delays a scrape. The schedule is drift-free: tick k is due at
``start + k * interval``; ticks that could not be kept (a scrape slower than the interval) are skipped and
the gap shows up as a jump in ``k``, never as a silently stretched interval.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from collector.protocol import bounded_http
from collector.protocol.clock import SYSTEM_CLOCK, Clock, Stamp, stamp
from collector.raw.metric_families import SCRAPE_STORED_MAX_BYTES, BoundedPage
from collector.raw.records import ScrapeRecord

NVIDIA_SMI_QUERY = (
    "timestamp,index,uuid,memory.used,memory.total,utilization.gpu,utilization.memory,power.draw,"
    "temperature.gpu,clocks.sm,clocks.mem,pstate"
)


class ScrapeWriter:
    """Serialises writes to the scrapes stream (the sampler thread and point-boundary scrapes share it).

    A failed write (disk full) goes to ``on_error`` (the run aborts, failed, with the reason) instead of
    killing the sampler thread with a traceback; later writes are dropped (the run is ending). The first
    page stored bounded goes to ``on_bounded`` (the run's one ``metrics_bounded`` event)."""

    def __init__(
        self,
        stream: Any,
        on_error: Callable[[OSError], None] | None = None,
        on_bounded: Callable[[ScrapeRecord], None] | None = None,
    ):
        self._stream = stream
        self._on_error = on_error
        self._on_bounded = on_bounded
        self._lock = threading.Lock()
        self.failed = False
        self.closed = False

    def close(self) -> None:
        """Drop every later write (the run is being sealed; a sampler still in a scrape adds nothing)."""
        with self._lock:
            self.closed = True

    def write(self, rec: ScrapeRecord) -> None:
        obj = rec.to_obj()
        tell = None
        with self._lock:
            if self.failed or self.closed:
                return
            try:
                self._stream.write_json(obj)
            except OSError as err:
                if self._on_error is None:
                    raise
                self.failed = True
                self._on_error(err)
                return
            # said once, by whichever thread first wrote a bounded scrape (and only once it was written)
            if rec.bounded and self._on_bounded is not None:
                tell, self._on_bounded = self._on_bounded, None
        if tell is not None:
            tell(rec)


def scrape_metrics(
    client: httpx.Client,
    url: str,
    clock: Clock = SYSTEM_CLOCK,
    *,
    tag: str,
    deadline_s: float = bounded_http.DEADLINE_S,
    stored_max_bytes: int = SCRAPE_STORED_MAX_BYTES,
    **where: int | str | None,
) -> ScrapeRecord:
    """GET ``url`` once, within ``deadline_s`` in all and at most ``bounded_http.METRICS_MAX_BYTES`` read; the
    body is stored bounded (``metric_families.BoundedPage``: verbatim up to ``stored_max_bytes``, else the
    families analysis reads, the rest counted; parsing is the analysis's job). A bound exceeded is a failed
    scrape (``error`` says which, no text kept): a trickling or huge /metrics must neither hang the run nor
    fill raw/. ``where``: the record's ``k``, ``due_mono_ns`` (a tick) or ``point`` (a boundary)."""
    start = stamp(clock)
    status: int | None = None
    text: str | None = None
    error: str | None = None
    page = BoundedPage(stored_max_bytes)
    try:
        status, text = bounded_http.get(
            client, url, deadline_s=deadline_s, max_bytes=bounded_http.METRICS_MAX_BYTES, body=page
        )
    except httpx.HTTPError as err:
        error = f"{type(err).__name__}: {err}"[:500]
    return _metrics_record(clock, start, status, text, error, page, tag=tag, url=url, **where)


async def scrape_metrics_async(
    client: httpx.AsyncClient,
    url: str,
    clock: Clock = SYSTEM_CLOCK,
    *,
    tag: str,
    point: str | None = None,
    deadline_s: float = bounded_http.DEADLINE_S,
    stored_max_bytes: int = SCRAPE_STORED_MAX_BYTES,
) -> ScrapeRecord:
    """``scrape_metrics`` on the event loop (the point-boundary scrapes): cancelled with its task, so a
    signal never waits for a slow server."""
    start = stamp(clock)
    status: int | None = None
    text: str | None = None
    error: str | None = None
    page = BoundedPage(stored_max_bytes)
    try:
        status, text = await bounded_http.aget(
            client, url, deadline_s=deadline_s, max_bytes=bounded_http.METRICS_MAX_BYTES, body=page
        )
    except httpx.HTTPError as err:
        error = f"{type(err).__name__}: {err}"[:500]
    return _metrics_record(clock, start, status, text, error, page, tag=tag, point=point, url=url)


def _metrics_record(
    clock: Clock,
    start: Stamp,
    status: int | None,
    text: str | None,
    error: str | None,
    page: BoundedPage,
    **fields: Any,
) -> ScrapeRecord:
    end = stamp(clock)
    bounded = text is not None and page.filtering
    return ScrapeRecord(
        dropped_series=page.dropped_series if bounded else None,
        dropped_bytes=page.dropped_bytes if bounded else None,
        source="metrics",
        start_mono_ns=start.mono_ns,
        start_unix_ns=start.unix_ns,
        end_mono_ns=end.mono_ns,
        end_unix_ns=end.unix_ns,
        status=status,
        error=error,
        text=text,
        **fields,
    )


def nvidia_smi_available() -> bool:
    return shutil.which("nvidia-smi") is not None


def query_nvidia_smi(
    clock: Clock = SYSTEM_CLOCK,
    timeout_s: float = 5.0,
    *,
    tag: str,
    k: int | None = None,
    due_mono_ns: int | None = None,
) -> ScrapeRecord:
    """One ``nvidia-smi --query-gpu`` call, CSV output verbatim."""
    cmd = ["nvidia-smi", f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,nounits"]
    start = stamp(clock)
    status: int | None = None
    text: str | None = None
    error: str | None = None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        status, text = p.returncode, p.stdout
        error = (p.stderr.strip()[:500] or None) if p.returncode else None
    except (OSError, subprocess.TimeoutExpired) as err:
        error = f"{type(err).__name__}: {err}"[:500]
    end = stamp(clock)
    return ScrapeRecord(
        source="nvidia-smi",
        tag=tag,
        start_mono_ns=start.mono_ns,
        start_unix_ns=start.unix_ns,
        end_mono_ns=end.mono_ns,
        end_unix_ns=end.unix_ns,
        status=status,
        error=error,
        text=text,
        k=k,
        due_mono_ns=due_mono_ns,
        query=NVIDIA_SMI_QUERY,
    )


@dataclass(frozen=True)
class ScrapeOptions:
    """What every /metrics request of a run carries and how much of each page is stored: ``headers`` an API
    key's Authorization (llama-server guards /metrics with it), ``stored_max_bytes`` the plan's bound."""

    headers: dict[str, str] = field(default_factory=dict)
    stored_max_bytes: int = SCRAPE_STORED_MAX_BYTES


class Sampler:
    """Start with ``start()``, stop with ``stop()`` (joins the thread; the current scrape finishes first)."""

    def __init__(
        self,
        base_url: str,
        interval_s: float,
        log: ScrapeWriter,
        emit: Callable[..., None],
        *,
        metrics: bool = True,
        nvidia_smi: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        scrape: ScrapeOptions | None = None,
    ):
        self.url = f"{base_url}/metrics"
        self.scrape = scrape or ScrapeOptions()
        self.interval_ns = int(interval_s * 1e9)
        self.log, self.emit, self.clock = log, emit, clock
        self.metrics, self.nvidia_smi = metrics, nvidia_smi
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self.metrics_failing = False
        self.scrapes = 0
        self.skipped_ticks = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_s: float | None = None) -> None:
        """Stop and join, waiting at most ``wait_s`` (default: a scrape's whole deadline) for a scrape in
        flight; the thread is a daemon, and the run's ScrapeWriter drops what it writes after the run closed
        it."""
        self._stop.set()
        self._thread.join(timeout=self.deadline_s + 1.0 if wait_s is None else wait_s)

    @property
    def deadline_s(self) -> float:
        """Each scrape's total deadline, s: twice the interval, at least 2 s."""
        return max(2.0, 2 * self.interval_ns / 1e9)

    def _run(self) -> None:
        with httpx.Client(timeout=self.deadline_s, headers=self.scrape.headers) as client:
            start_ns = self.clock.mono_ns()
            k = 0
            while not self._stop.is_set():
                due_ns = start_ns + k * self.interval_ns
                wait_ns = due_ns - self.clock.mono_ns()
                if wait_ns > 0 and self._stop.wait(wait_ns / 1e9):
                    break
                self._tick(client, k, due_ns)
                # the next tick still in the future; missed ones are skipped, not squeezed in
                now = self.clock.mono_ns()
                nxt = max(k + 1, (now - start_ns) // self.interval_ns + 1)
                self.skipped_ticks += nxt - k - 1
                k = nxt

    def _tick(self, client: httpx.Client, k: int, due_ns: int) -> None:
        if self.metrics:
            rec = scrape_metrics(
                client,
                self.url,
                self.clock,
                tag="tick",
                k=k,
                due_mono_ns=due_ns,
                deadline_s=self.deadline_s,
                stored_max_bytes=self.scrape.stored_max_bytes,
            )
            self.log.write(rec)
            self.scrapes += 1
            failing = rec.error is not None or rec.status != 200
            if failing != self.metrics_failing:
                self.metrics_failing = failing
                if failing:
                    self.emit("metrics_unreachable", url=self.url, status=rec.status, error=rec.error)
                else:
                    self.emit("metrics_back", url=self.url)
        if self.nvidia_smi:
            self.log.write(query_nvidia_smi(self.clock, tag="tick", k=k, due_mono_ns=due_ns))
