"""One typed record per line of each stream the collector writes: the collector builds them and writes
``to_obj()``; analysis reads ``from_obj(obj, path, line)`` back. Both sides use these types, so the format of
``requests.jsonl``, ``events.jsonl`` and ``scrapes.jsonl`` is defined here and nowhere else.

Every line carries ``"v": 1`` (the format version). Times are integer nanoseconds: ``*_mono_ns`` is the
collector's CLOCK_MONOTONIC, ``*_unix_ns`` the wall clock. Streams are written with sorted keys, so a line's
bytes depend only on the object ``to_obj()`` returns. ``from_obj`` turns every shape problem into a ParseError
naming the file, the line and the key; nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.raw.errors import ParseError
from collector.raw.jsonl import clip

VERSION = 1


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _version(obj: Any, path: str | Path, line: int | None, what: str) -> None:
    if not isinstance(obj, dict):
        raise ParseError(path, line, f"expected a JSON object ({what})")
    if obj.get("v") != VERSION:
        raise ParseError(path, line, f"unknown {what} version {obj.get('v')!r} (this reader reads version 1)")


# ------------------------------------------------------------------------------------------ requests.jsonl

REQUEST_ERROR_KINDS = frozenset(
    {"http", "timeout", "connect", "stream_cut", "protocol", "server_error_event", "http_other", "aborted"}
)


@dataclass(frozen=True)
class RequestRecord:
    """One line of ``requests.jsonl``: one request the collector sent, written when the request ended.

    - identity: ``request_id``, ``phase``, ``phase_kind`` (warmup|concurrency|length|overload), ``point``
      (point id), ``point_index``, ``index`` (within the point), ``worker``, ``concurrency``, ``seed``,
      ``input_len`` (prompt ids sent), ``max_tokens``;
    - times: ``send_*`` just before the request was written, ``headers_mono_ns`` when the response headers
      arrived, ``chunk_mono_ns`` / ``chunk_unix_ns`` the receive time of each chunk carrying ``choices``,
      ``end_*`` when the stream ended; ``chunk_tokens`` tokens in each chunk (how counted:
      ``token_count_source``: token_ids, usage, timings, events or mixed);
    - outcome: ``http_status``, ``done`` (``[DONE]`` seen), ``usage`` (last usage object), ``finish_reason``,
      ``engine_timings`` (llama.cpp's last ``timings``), ``response_id``, ``error`` (null, or
      ``{kind, message}`` with a kind of ``REQUEST_ERROR_KINDS``), kept here as ``error_kind`` and
      ``error_message``; ``retries`` (written only when not 0; absent in older runs): times the request was
      sent again because a kept-alive connection closed before any response byte (the send times are the
      last attempt's);
    - open loop (a ``phase_kind`` "rate" point; both absent for closed-loop records and in older runs):
      ``scheduled_mono_ns`` the send time the point's arrival schedule set for this request (the point's start
      plus ``collector.loadgen.arrival_offsets_ns``), so ``send_mono_ns − scheduled_mono_ns`` is how late the
      client sent it (its own event loop, or a ``max_concurrency`` cap the request waited on for a slot);
      ``request_rate`` the point's offered rate from the plan, req/s (its end rate under a ramp-up);
    - workload (collector.workload; each absent when not set, and in older runs): ``endpoint`` "chat" for
      ``/v1/chat/completions`` (absent: ``/v1/completions``); ``prompt_format`` "text" when the prompt was
      sent as text (chat messages, a dataset without its tokenizer, multi-turn): ``input_len`` is then the
      server's ``usage.prompt_tokens`` (0 when it sent none), else the ids sent; ``prefix_id`` which shared
      prefix the prompt began with; ``conversation`` and ``turn`` (0-based) a multi-turn request's place;
    - ``token_count_problem`` (absent when none, and in older runs): the first chunk whose token count no
      real stream gives (below 0: a cumulative count that went back; above ``max_tokens``), as the server sent
      it; ``chunk_tokens`` holds it clipped into that range and analysis distrusts the request's counts.
    """

    request_id: str
    phase: str
    phase_kind: str
    point: str
    point_index: int
    index: int
    worker: int
    concurrency: int
    seed: int
    input_len: int
    max_tokens: int
    send_mono_ns: int
    send_unix_ns: int
    headers_mono_ns: int | None
    end_mono_ns: int
    end_unix_ns: int
    http_status: int | None
    chunk_mono_ns: tuple[int, ...]
    chunk_unix_ns: tuple[int, ...]
    chunk_tokens: tuple[int, ...]
    token_count_source: str | None
    done: bool
    usage: dict[str, Any] | None
    finish_reason: str | None
    engine_timings: dict[str, Any] | None
    response_id: str | None
    error_kind: str | None
    error_message: str | None
    retries: int = 0
    scheduled_mono_ns: int | None = None
    request_rate: float | None = None
    endpoint: str | None = None
    prompt_format: str | None = None
    prefix_id: int | None = None
    conversation: int | None = None
    turn: int | None = None
    token_count_problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def prompt_tokens(self) -> int | None:
        """Prompt tokens as the server counted them (usage), None when it sent no usage."""
        v = (self.usage or {}).get("prompt_tokens")
        return v if isinstance(v, int) else None

    @property
    def completion_tokens(self) -> int | None:
        """Generated tokens as the server counted them (usage), None when it sent no usage."""
        v = (self.usage or {}).get("completion_tokens")
        return v if isinstance(v, int) else None

    def to_obj(self) -> dict[str, Any]:
        """The line as the collector writes it."""
        error = None if self.error_kind is None else {"kind": self.error_kind, "message": self.error_message}
        return {
            "v": VERSION,
            **{k: getattr(self, k) for k in _REQ_STR + _REQ_INT},
            "headers_mono_ns": self.headers_mono_ns,
            "http_status": self.http_status,
            "chunk_mono_ns": list(self.chunk_mono_ns),
            "chunk_unix_ns": list(self.chunk_unix_ns),
            "chunk_tokens": list(self.chunk_tokens),
            "token_count_source": self.token_count_source,
            "done": self.done,
            "usage": self.usage,
            "finish_reason": self.finish_reason,
            "engine_timings": self.engine_timings,
            "response_id": self.response_id,
            "error": error,
            **({"retries": self.retries} if self.retries else {}),
            **({"scheduled_mono_ns": self.scheduled_mono_ns} if self.scheduled_mono_ns is not None else {}),
            **({"request_rate": self.request_rate} if self.request_rate is not None else {}),
            **{k: getattr(self, k) for k in _REQ_OPTIONAL if getattr(self, k) is not None},
        }

    @classmethod
    def from_obj(cls, obj: Any, path: str | Path = "<record>", line: int | None = None) -> RequestRecord:
        """One decoded line → RequestRecord; every shape problem is a ParseError naming the key."""

        _version(obj, path, line, "record")
        problem = _request_identity_problem(obj) or _request_chunks_problem(obj) or _request_rest_problem(obj)
        if problem:
            raise ParseError(path, line, problem)
        return cls.from_checked(
            obj, tuple(obj["chunk_mono_ns"]), tuple(obj["chunk_unix_ns"]), tuple(obj["chunk_tokens"])
        )

    @classmethod
    def from_checked(
        cls,
        obj: Any,
        chunk_mono_ns: tuple[int, ...],
        chunk_unix_ns: tuple[int, ...],
        chunk_tokens: tuple[int, ...],
    ) -> RequestRecord:
        """The record of a line ``from_obj`` already found sound (or whose fields a columnar reader checked
        the same way), its chunk arrays given apart: no check repeated."""
        rate, err = obj.get("request_rate"), obj.get("error")
        return cls(
            **{k: obj[k] for k in _REQ_INT + _REQ_STR},
            headers_mono_ns=obj.get("headers_mono_ns"),
            http_status=obj.get("http_status"),
            chunk_mono_ns=chunk_mono_ns,
            chunk_unix_ns=chunk_unix_ns,
            chunk_tokens=chunk_tokens,
            token_count_source=obj.get("token_count_source"),
            done=obj["done"],
            usage=obj.get("usage"),
            finish_reason=obj.get("finish_reason"),
            engine_timings=obj.get("engine_timings"),
            response_id=obj.get("response_id"),
            error_kind=err["kind"] if err else None,
            error_message=err["message"] if err else None,
            retries=obj.get("retries", 0),
            scheduled_mono_ns=obj.get("scheduled_mono_ns"),
            request_rate=None if rate is None else float(rate),
            **{k: obj.get(k) for k in _REQ_OPTIONAL},
        )


def request_fields_problem(obj: Any) -> str | None:
    """What is wrong with a request line's fields other than its chunk arrays (identity, then the rest, in
    ``from_obj``'s order), or None: what a columnar reader checks per line, the chunk arrays checked apart."""
    return _request_identity_problem(obj) or _request_rest_problem(obj)


def _request_identity_problem(obj: Any) -> str | None:
    """What is wrong with a request line's identity fields (integers, strings), or None."""
    for k in _REQ_INT:
        if not _is_int(obj.get(k)):
            return f"key {k!r} should be an integer, got {clip(repr(obj.get(k)), 40)}"
    for k in _REQ_STR:
        if not isinstance(obj.get(k), str):
            return f"key {k!r} should be a string, got {clip(repr(obj.get(k)), 40)}"
    return None


def _request_chunks_problem(obj: Any) -> str | None:
    """What is wrong with a request line's per-chunk arrays (integers, one length, times not going back)."""
    for k in ("chunk_mono_ns", "chunk_unix_ns", "chunk_tokens"):
        v = obj.get(k)
        if not isinstance(v, list) or not all(_is_int(x) for x in v):
            return f"key {k!r} should be a list of integers"
    mono = obj["chunk_mono_ns"]
    if not len(mono) == len(obj["chunk_unix_ns"]) == len(obj["chunk_tokens"]):
        return "chunk_mono_ns, chunk_unix_ns and chunk_tokens differ in length"
    if any(b < a for a, b in zip(mono, mono[1:], strict=False)):
        return "chunk_mono_ns goes backwards"
    return None


def _request_rest_problem(obj: Any) -> str | None:
    """What is wrong with a request line's other fields (status, objects, flags, rate, error), or None."""
    for k in ("headers_mono_ns", "http_status"):
        if obj.get(k) is not None and not _is_int(obj[k]):
            return f"key {k!r} should be an integer or null"
    for k in ("usage", "engine_timings"):
        if obj.get(k) is not None and not isinstance(obj[k], dict):
            return f"key {k!r} should be an object or null"
    if not isinstance(obj.get("done"), bool):
        return "key 'done' should be true or false"
    if not _is_int(obj.get("retries", 0)):
        return "key 'retries' should be an integer"
    if obj.get("scheduled_mono_ns") is not None and not _is_int(obj["scheduled_mono_ns"]):
        return "key 'scheduled_mono_ns' should be an integer (ns) or absent"
    rate = obj.get("request_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or not rate > 0):
        return f"key 'request_rate' should be a number > 0 (req/s) or absent, got {clip(repr(rate), 40)}"
    for k, kind in _REQ_OPTIONAL.items():
        v = obj.get(k)
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
            return f"key {k!r} should be {kind.__name__} or absent, got {clip(repr(v), 40)}"
    err = obj.get("error")
    if err is not None and (
        not isinstance(err, dict)
        or err.get("kind") not in REQUEST_ERROR_KINDS
        or not isinstance(err.get("message"), str)
    ):
        return f"key 'error' should be null or {{kind, message}} with a known kind, got {clip(repr(err), 60)}"
    return None


_REQ_INT = (
    "point_index",
    "index",
    "worker",
    "concurrency",
    "seed",
    "input_len",
    "max_tokens",
    "send_mono_ns",
    "send_unix_ns",
    "end_mono_ns",
    "end_unix_ns",
)
_REQ_STR = ("request_id", "phase", "phase_kind", "point")
# the workload's optional identity fields (written only when set)
_REQ_OPTIONAL: dict[str, type] = {
    "endpoint": str,
    "prompt_format": str,
    "prefix_id": int,
    "conversation": int,
    "turn": int,
    "token_count_problem": str,
}


# -------------------------------------------------------------------------------------------- events.jsonl

EVENT_KINDS = frozenset(
    {
        "run_start",
        "run_end",
        "server_start",
        "server_healthy",
        "server_exit",
        "check",
        "phase_start",
        "phase_end",
        "point_start",
        "point_end",
        "fault",
        "abort",
        "metrics_unreachable",
        "metrics_back",
        "metrics_bounded",
        "drain",
        "client_probe",
        "client_stack",
        "load_backend",
        "shard_clock",
        "shard_lost",
    }
)


@dataclass(frozen=True)
class EventRecord:
    """One line of ``events.jsonl``: what happened during a collector run, in order.

    Every line: ``v``, ``kind`` (one of ``EVENT_KINDS``), ``mono_ns``, ``unix_ns``, plus fields of that kind
    (kept in ``fields``):

    - ``run_start`` (plan, campaign, run, server_mode), ``run_end`` (status, reason, checks_failed);
    - ``server_start`` (mode, url, argv), ``server_healthy`` (waited_s), ``server_exit`` (code, expected);
    - ``check`` (a ``CheckResult``: scope, name, ok, detail, point, facts);
    - ``phase_start`` / ``phase_end`` (phase, phase_kind; aborted); ``point_start`` (point, phase, phase_kind,
      concurrency, requests, input_len, output_len, seed) / ``point_end`` (point, sent, finished, ok,
      errors {kind: n}, aborted);
    - ``fault`` (what, detail), ``abort`` (reason, point), ``metrics_unreachable`` / ``metrics_back`` (url,
      status, error); ``metrics_bounded`` (once a run, at its first /metrics page stored bounded: url, tag,
      received_bytes, stored_bytes, dropped_series, bound_bytes); ``drain`` (seconds);
    - ``client_probe`` (the load client watching itself during a point, written before its ``point_end``;
      absent in older runs): point, ``period_ns`` (the probe's period), ``due_mono_ns`` and ``lag_ns`` (each
      wake-up of a task that sleeps to a deadline on the client's event loop: how late it ran — a busy loop
      reads every chunk that late), ``cpu_ns`` / ``wall_ns`` (the client process's user + system CPU and the
      wall time over the point), ``shard`` (which load-client process; one event each) of ``shards``;
    - ``client_stack`` (once, as the load begins; absent in older runs): the load client's ``loop`` (the one
      running, with its version), ``transport`` (the HTTP package under httpx, with its version), ``httpx``;
    - with ``[load] backend = "ray"`` only (collector.protocol.ray_backend): ``load_backend`` once (backend,
      ray_version, address, nodes, cpus); per point and shard ``shard_clock`` (point, shard, node_id, pid,
      node_ip, round_trip_ns [every round trip], offset_ns / unix_offset_ns [driver − shard clock, the best
      round trip's midpoint estimate], uncertainty_ns [half that round trip]: the shard's records are
      shifted onto the driver's clocks by the offsets) and, when a shard's actor or node died mid-point,
      ``shard_lost`` (point, shard, node_id, reason, received [its records that came back], lost_request_ids
      [its requests with no record]).
    """

    kind: str
    mono_ns: int
    unix_ns: int
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    def to_obj(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "kind": self.kind,
            "mono_ns": self.mono_ns,
            "unix_ns": self.unix_ns,
            **self.fields,
        }

    @classmethod
    def from_obj(cls, obj: Any, path: str | Path = "<event>", line: int | None = None) -> EventRecord:
        _version(obj, path, line, "event")
        kind = obj.get("kind")
        if kind not in EVENT_KINDS:
            raise ParseError(path, line, f"unknown event kind {kind!r}")
        if not (_is_int(obj.get("mono_ns")) and _is_int(obj.get("unix_ns"))):
            raise ParseError(path, line, "mono_ns and unix_ns should be integers")
        if kind == "check" and (
            obj.get("ok") not in (True, False, None) or not isinstance(obj.get("name"), str)
        ):
            raise ParseError(path, line, "a check needs a name and ok: true, false or null")
        rest = {k: v for k, v in obj.items() if k not in ("v", "kind", "mono_ns", "unix_ns")}
        return cls(kind, obj["mono_ns"], obj["unix_ns"], rest)


@dataclass(frozen=True)
class CheckResult:
    """A self-check's verdict, written as a ``check`` event: ``ok`` is True (pass), False (fail) or None (not
    applicable / could not be decided; ``detail`` says why). ``point`` is None for start-up checks; ``facts``
    holds the numbers behind the verdict when there are any."""

    scope: str  # "startup" | "point"
    name: str
    ok: bool | None
    detail: str
    point: str | None = None
    facts: dict[str, Any] | None = None

    def event_fields(self) -> dict[str, Any]:
        """The check event's fields (``point`` and ``facts`` only when set)."""
        ev: dict[str, Any] = {"scope": self.scope, "name": self.name, "ok": self.ok, "detail": self.detail}
        if self.point is not None:
            ev["point"] = self.point
        if self.facts:
            ev["facts"] = self.facts
        return ev

    @classmethod
    def from_event(cls, e: EventRecord) -> CheckResult:
        return cls(
            e.get("scope", ""),
            e.get("name"),
            e.get("ok"),
            e.get("detail", ""),
            e.get("point"),
            e.get("facts"),
        )


# ------------------------------------------------------------------------------------------- scrapes.jsonl

SCRAPE_SOURCES = ("metrics", "nvidia-smi")


@dataclass(frozen=True)
class ScrapeRecord:
    """One line of ``scrapes.jsonl``: one raw observation by the sampler or at a point boundary, verbatim.

    ``source`` ``metrics`` (the server's Prometheus text, from ``url``) or ``nvidia-smi`` (CSV of
    ``nvidia-smi --query-gpu=<query> --format=csv,nounits``); ``start_*`` request sent / command started,
    ``end_*`` answer received; ``status`` HTTP status or exit code, ``error`` and ``text`` (verbatim body or
    stdout), null when there was no answer. ``tag``: ``tick`` (the periodic sampler: tick number ``k`` due at
    ``due_mono_ns``), ``startup``, or ``point_start``/``point_end`` (the collector's own /metrics scrapes at
    point boundaries, which carry ``point``, null at start-up). ``dropped_series`` / ``dropped_bytes`` (both
    absent when the page was stored verbatim, and in older runs): a page larger than
    ``metric_families.SCRAPE_STORED_MAX_BYTES``, stored as only the families analysis reads — the sample lines
    and bytes not kept. ``line`` is where it was read from (not written).
    """

    source: str
    tag: str
    start_mono_ns: int
    start_unix_ns: int
    end_mono_ns: int
    end_unix_ns: int
    status: int | None
    error: str | None
    text: str | None
    k: int | None = None
    due_mono_ns: int | None = None
    point: str | None = None
    url: str | None = None
    query: str | None = None
    dropped_series: int | None = None
    dropped_bytes: int | None = None
    line: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None and self.status in (200, 0)

    @property
    def bounded(self) -> bool:
        """A page larger than its stored bound: only the kept families are in ``text``."""
        return self.dropped_bytes is not None

    def to_obj(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "v": VERSION,
            "source": self.source,
            "tag": self.tag,
            "start_mono_ns": self.start_mono_ns,
            "start_unix_ns": self.start_unix_ns,
            "end_mono_ns": self.end_mono_ns,
            "end_unix_ns": self.end_unix_ns,
            "status": self.status,
            "error": self.error,
            "text": self.text,
        }
        if self.source == "metrics":
            obj["url"] = self.url
        else:
            obj["query"] = self.query
        if self.tag == "tick":
            obj["k"], obj["due_mono_ns"] = self.k, self.due_mono_ns
        elif self.source == "metrics":
            obj["point"] = self.point
        if self.dropped_bytes is not None:
            obj["dropped_series"], obj["dropped_bytes"] = self.dropped_series, self.dropped_bytes
        return obj

    @classmethod
    def from_obj(cls, obj: Any, path: str | Path = "<scrape>", line: int | None = None) -> ScrapeRecord:
        _version(obj, path, line, "scrape")
        if obj.get("source") not in SCRAPE_SOURCES:
            raise ParseError(path, line, f"unknown source {obj.get('source')!r}")
        for k in ("start_mono_ns", "start_unix_ns", "end_mono_ns", "end_unix_ns"):
            if not _is_int(obj.get(k)):
                raise ParseError(path, line, f"key {k!r} should be an integer")
        for k, kinds in (
            ("status", int),
            ("error", str),
            ("text", str),
            ("k", int),
            ("due_mono_ns", int),
            ("point", str),
            ("url", str),
            ("query", str),
            ("dropped_series", int),
            ("dropped_bytes", int),
        ):
            if obj.get(k) is not None and not isinstance(obj[k], kinds):
                raise ParseError(path, line, f"key {k!r} should be {kinds.__name__} or null")
        if not isinstance(obj.get("tag"), str):
            raise ParseError(path, line, "key 'tag' should be a string")
        return cls(
            source=obj["source"],
            tag=obj["tag"],
            start_mono_ns=obj["start_mono_ns"],
            start_unix_ns=obj["start_unix_ns"],
            end_mono_ns=obj["end_mono_ns"],
            end_unix_ns=obj["end_unix_ns"],
            status=obj.get("status"),
            error=obj.get("error"),
            text=obj.get("text"),
            k=obj.get("k"),
            due_mono_ns=obj.get("due_mono_ns"),
            point=obj.get("point"),
            url=obj.get("url"),
            query=obj.get("query"),
            dropped_series=obj.get("dropped_series"),
            dropped_bytes=obj.get("dropped_bytes"),
            line=line,
        )
