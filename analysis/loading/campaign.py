"""A campaign's runs, read from the raw store and parsed once, as the reconciliations need them.

Every raw file goes through its one parser (``analysis.parse.parser_for``); this module only arranges
the records: runs by round/engine/test kind, and one ``BenchPoint`` per `vllm bench serve` summary with
the request parameters found for it in a sweep log, and a citation root so every finding can name the
file it came from.

A run with a ``requests.jsonl`` (our collector's) is summarised from it: one point per point id, every
number recomputed by ``analysis.core.metrics`` (canonical definitions), so a fix there reaches every run
already
collected. The per-point ``bench/*.json`` copies older runs also hold are never read. A run without one
(the reference campaign: files written by ``vllm bench serve``) is read from its summary JSON files, numbers
of vllm bench's own definitions. Each point says which (``BenchPoint.metric_definition``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from analysis.core import metrics, metrics_columns
from analysis.core.windows import naive_as_utc_epoch_s
from analysis.loading import rundocs
from analysis.loading.rundocs import RunDocs, read_run_docs
from analysis.parse import parser_for
from analysis.parse.bench_json import BenchResult
from analysis.parse.events_jsonl import parse_events_jsonl
from analysis.parse.fingerprint_txt import Fingerprint
from analysis.parse.llamacpp_log import LlamacppServerLog
from analysis.parse.peers import parse_result_json
from analysis.parse.prometheus import PromSnapshot
from analysis.parse.request_columns import RequestColumns, parse_request_columns
from analysis.parse.sampler_csv import SamplerTable
from analysis.parse.scrapes_jsonl import parse_scrapes_jsonl
from analysis.parse.sweep_log import SweepLog, SweepPoint
from analysis.parse.vllm_log import VllmServerLog
from collector.raw.decisions import excluded_runs
from collector.raw.errors import AnatomyError, ParseError, StoreError
from collector.raw.records import EventRecord, RequestRecord, ScrapeRecord
from collector.raw.store import RawStore, RunInfo, open_run, run_state, text_name, verify_run

# Store bookkeeping that no parser covers: never measurement data.
_STORE_FILES = {"run.json", "journal.jsonl", "manifest.json", "SEALED"}
REQUESTS_FILE = "requests.jsonl"
# see is_experiment_run: issue #15's one-knob experiments, issue #26's deployment ladder, speculative decoding
# and slot-history runs
EXPERIMENT_PREFIXES = ("exp-", "ladder-", "spec-", "slots-hist-")
_R = TypeVar("_R")  # the record type a RunData accessor looks for


@dataclass
class RequestLog:
    """Our collector's requests of one run (requests.jsonl), read once into columns; the ``RequestRecord``
    objects only for the readers that ask for them, built once from the columns."""

    columns: RequestColumns
    _records: list[RequestRecord] | None = field(default=None, repr=False)
    _groups: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _point_columns: dict[str, RequestColumns] = field(default_factory=dict, repr=False)

    @property
    def records(self) -> list[RequestRecord]:
        if self._records is None:
            self._records = self.columns.records()
        return self._records

    @property
    def points(self) -> dict[str, np.ndarray]:
        """Request indices (file order) by point id, in order of first appearance."""
        if self._groups is None:
            self._groups = self.columns.groups("point")
        return self._groups

    def point_columns(self, point: str) -> RequestColumns | None:
        """The point's requests in columns, made once (views of the run's arrays when its lines are
        contiguous), so what the metrics derive from them is derived once too."""
        cols = self._point_columns.get(point)
        idx = self.points.get(point)
        if cols is None and idx is not None:
            cols = self._point_columns[point] = self.columns.take(idx)
        return cols

    def point_records(self, point: str) -> list[RequestRecord]:
        """The point's records in file order ([] for a point id no request has)."""
        idx = self.points.get(point)
        if idx is None:
            return []
        if self._records is not None:
            return [self._records[int(i)] for i in idx]
        return self.columns.records(idx)


@dataclass
class ScrapeLog:
    """Our collector's sampler scrapes of one run (scrapes.jsonl)."""

    records: list[ScrapeRecord]


@dataclass
class EventLog:
    """Our collector's events of one run (events.jsonl); line = index + 1."""

    records: list[EventRecord]


# Own-run phase kinds (requests.jsonl `phase_kind`) -> the test kinds the reconciliations select on.
PHASE_TEST_KIND = {
    "concurrency": "concurrency_sweep",
    "length": "length_sweep",
    "overload": "overload",
    "rate": "rate_sweep",  # open loop (issue #14): analysis.reconcile.rates, the SLO planner's rate answer
    "warmup": "warmup",
}
COLLECTOR_RUN_KIND = "collector-run"
CEILINGS_RUN_KIND = "ceilings"
BENCH_DATE_FORMAT = "%Y%m%d-%H%M%S"


@dataclass
class BenchPoint:
    """One `vllm bench serve` summary: a benchmark point with what is known about its request shape."""

    run: RunData
    file: str  # name inside the run (e.g. "vllm_c064.json")
    result: BenchResult
    label: str  # file stem ("vllm_c064", "len_1024", "stress", "_warmup")
    warmup: bool
    concurrency: int | None
    input_len_tokens: float | None  # total_input_tokens / completed (fixed-length random prompts)
    requested_output_len_tokens: int | None
    protocol_source: str | None  # citation of the requested lengths (a sweep log's Namespace line)
    protocol_borrowed: bool  # lengths taken from another run's log (this run kept none)
    sweep_point: SweepPoint | None  # the matching point of the run's sweep log, if it has one
    order: int  # position in the sweep log (ground truth of the order), else by date
    kind: str | None = None  # own runs: the point's test kind (PHASE_TEST_KIND); None: the run's
    # which definitions the result's latencies/throughputs follow: metrics.CANONICAL (recomputed from
    # requests.jsonl), metrics.VLLM_BENCH (a file written by `vllm bench serve`) or the peer tool's own
    # (metrics.AIPERF_DEFINITION, metrics.GUIDELLM_DEFINITION)
    metric_definition: str = metrics.VLLM_BENCH

    @property
    def test_kind(self) -> str:
        """What test this point belongs to: its own phase's kind in a collector run, else the run's."""
        return self.kind or self.run.test_kind

    @property
    def key(self) -> str:
        """Stable id of the point inside a campaign: `<run>/<label>`."""
        return f"{self.run.name}/{self.label}"

    def cite(self, field_name: str | None = None) -> str:
        return self.run.cite(self.file, field_name)

    @property
    def records(self) -> list[RequestRecord]:
        """The point's request records (``RequestRecord``: the lines of its run's requests.jsonl whose
        ``point`` is this point's label), in file order; [] for a run without that file."""
        _, log = self.run.requests
        return log.point_records(self.label) if log is not None else []

    @property
    def columns(self) -> RequestColumns | None:
        """The point's requests in columns (file order); None for a run without requests.jsonl or a point
        no request has."""
        _, log = self.run.requests
        return log.point_columns(self.label) if log is not None else None

    @property
    def end_naive_utc_s(self) -> float | None:
        """The result's `date` (client wall clock at the end, no zone) read as if UTC, epoch s."""
        return bench_date_naive_utc_s(self.result.date)

    @property
    def temperature(self) -> float | None:
        return None if self.sweep_point is None else self.sweep_point.namespace.get("temperature")


def bench_date_naive_utc_s(date: str | None) -> float | None:
    """`20260825-212205` (the client's wall clock, no zone) → epoch seconds as if UTC."""
    if not date:
        return None
    return naive_as_utc_epoch_s(datetime.strptime(date, BENCH_DATE_FORMAT))


@dataclass
class RunData:
    info: RunInfo
    round: str | None  # normalised: "round1", "round2"; None for campaigns without rounds
    engine: str
    test: str
    test_kind: str
    cite_root: str
    records: dict[str, Any] = field(default_factory=dict)  # file name -> parsed record
    points: list[BenchPoint] = field(default_factory=list)
    docs: RunDocs = field(default_factory=RunDocs)
    state: str = "unsealed"  # collector.raw.store.RUN_STATES; set from the run's seal by load_campaign

    @property
    def own(self) -> bool:
        """Written by our collector (`collector run`): exact clocks, scrapes, events, a prediction."""
        return self.info.kind == COLLECTOR_RUN_KIND

    @property
    def name(self) -> str:
        return self.info.name

    def cite(self, rel: str, where: int | str | None = None) -> str:
        """`<original folder>/<file>[:line|:field]`: what a page shows as the source of a number."""
        base = f"{self.cite_root}/{rel}" if self.cite_root else rel
        return base if where is None else f"{base}:{where}"

    def _of_type(self, kind: type[_R]) -> tuple[str, _R] | tuple[None, None]:
        """The first file (by name) whose record is a ``kind``, and that record."""
        for rel in sorted(self.records):
            rec = self.records[rel]
            if isinstance(rec, kind):
                return rel, rec
        return None, None

    @property
    def sweep(self) -> tuple[str, SweepLog] | tuple[None, None]:
        return self._of_type(SweepLog)

    @property
    def sampler(self) -> tuple[str, SamplerTable] | tuple[None, None]:
        return self._of_type(SamplerTable)

    @property
    def vllm_log(self) -> tuple[str, VllmServerLog] | tuple[None, None]:
        return self._of_type(VllmServerLog)

    @property
    def llamacpp_log(self) -> tuple[str, LlamacppServerLog] | tuple[None, None]:
        return self._of_type(LlamacppServerLog)

    @property
    def server_log(self) -> tuple[str, Any] | tuple[None, None]:
        """The vLLM log, else the llama.cpp log (typed alike: ``vllm_log``, ``llamacpp_log``)."""
        rel, rec = self.vllm_log
        return (rel, rec) if rel else self.llamacpp_log

    @property
    def scrape(self) -> tuple[str, PromSnapshot] | tuple[None, None]:
        return self._of_type(PromSnapshot)

    @property
    def fingerprint(self) -> tuple[str, Fingerprint] | tuple[None, None]:
        return self._of_type(Fingerprint)

    @property
    def requests(self) -> tuple[str, RequestLog] | tuple[None, None]:
        return self._of_type(RequestLog)

    @property
    def scrapes(self) -> tuple[str, ScrapeLog] | tuple[None, None]:
        return self._of_type(ScrapeLog)

    @property
    def events(self) -> tuple[str, EventLog] | tuple[None, None]:
        return self._of_type(EventLog)

    @property
    def counter_source(self) -> str | None:
        """The run-relative file the server's counters come from: the sampler CSV, else scrapes.jsonl."""
        rel, _ = self.sampler
        if rel is None:
            rel, _ = self.scrapes
        return rel


@dataclass
class BrokenRun:
    """A run that could not be read or parsed: analysis reports it (one n/a finding with ``reason``, the
    one-line error) and goes on with the rest of the campaign."""

    name: str
    path: Path
    state: str  # collector.raw.store.RUN_STATES
    reason: str
    engine: str | None
    cite_root: str  # as RunData.cite_root
    source: str  # citation of the file the error names (else the run folder)


@dataclass
class Campaign:
    """A campaign's runs. ``runs`` are its protocol runs, the ones every campaign-level reconciliation reads;
    ``experiment_runs`` are the arms of one-knob experiments (``is_experiment_run``), read only by
    ``reconcile.experiments`` — a sweep with one knob changed must never stand in for the campaign's sweep."""

    name: str
    runs: list[RunData]
    broken: list[BrokenRun] = field(default_factory=list)
    verified: bool = True  # every run folder verified before loading (False: `analyze --no-verify`)
    experiment_runs: list[RunData] = field(default_factory=list)
    # the percentiles the per-point tables report (`analyze --metric-percentiles`; default
    # metrics.DEFAULT_PERCENTILES)
    percentiles: tuple[float, ...] = metrics.DEFAULT_PERCENTILES
    # runs a `collector exclude` decision leaves out of every conclusion: run name -> the reason given
    excluded: dict[str, str] = field(default_factory=dict)

    @property
    def all_runs(self) -> list[RunData]:
        """Protocol runs, then experiment runs (each by name): for what concerns every run (states, clocks,
        theory). Protocol runs first, so a fact every run states (the model config) is cited from one of
        them."""
        return self.runs + self.experiment_runs

    @property
    def rounds(self) -> list[str | None]:
        return sorted({r.round for r in self.runs}, key=lambda x: (x is None, x or ""))

    def select(
        self, round: str | None = None, engine: str | None = None, test_kind: str | None = None
    ) -> list[RunData]:
        out = [
            r
            for r in self.runs
            if (round is None or r.round == round)
            and (engine is None or r.engine == engine)
            and (test_kind is None or r.test_kind == test_kind)
        ]
        return sorted(out, key=lambda r: r.name)

    def points(
        self, round: str | None = None, engine: str | None = None, test_kind: str | None = None
    ) -> list[BenchPoint]:
        """Points of the selected runs in order; `test_kind` selects on each point's own kind (a collector run
        holds a sweep, a length sweep and an overload in one run)."""
        return [
            p
            for r in self.select(round=round, engine=engine)
            for p in sorted(r.points, key=lambda p: p.order)
            if test_kind is None or p.test_kind == test_kind
        ]

    @property
    def own(self) -> bool:
        """Every run with points was written by our collector."""
        runs = [r for r in self.runs if r.points]
        return bool(runs) and all(r.own for r in runs)

    def prefix(self, round: str | None) -> str:
        """Finding-key prefix of a round: `round2.`; empty for a campaign without rounds."""
        return f"{round}." if round else ""


def normalise_round(value: str | None) -> str | None:
    """`Round2` → `round2` (key-friendly); None stays None."""
    if not value:
        return None
    return re.sub(r"[^a-z0-9]+", "", str(value).lower()) or None


def _cite_root(info: RunInfo) -> str:
    src = info.meta.get("source")
    if isinstance(src, dict) and src.get("relative_dir"):
        return str(src["relative_dir"])
    return info.name


def _is_document(rel: str) -> bool:
    """Run documents read by analysis.loading.rundocs (or verbatim fingerprint files): no measurement
    parser."""
    name = Path(rel).name
    return (
        rel.startswith("fingerprint/")
        or name in (rundocs.CEILINGS_FILE, rundocs.PLAN_FILE)
        or rel in rundocs.MODEL_CONFIG_FILES
    )


def _parse_run(info: RunInfo) -> dict[str, Any]:
    # the collector's append streams; an unsealed run may end in a torn line
    streams = {
        REQUESTS_FILE: (parse_request_columns, RequestLog),
        "scrapes.jsonl": (parse_scrapes_jsonl, ScrapeLog),
        "events.jsonl": (parse_events_jsonl, EventLog),
    }
    records: dict[str, Any] = {}
    own = info.kind in (COLLECTOR_RUN_KIND, CEILINGS_RUN_KIND)
    files = sorted(info.data_files())
    has_requests = any(Path(rel).name == REQUESTS_FILE for rel in files)
    for rel in files:
        if Path(rel).name in _STORE_FILES:
            continue
        if Path(rel).name in streams:
            fn, wrap = streams[Path(rel).name]
            records[rel] = wrap(fn(info.path / rel, allow_torn_tail=not info.sealed))
            continue
        if own and _is_document(rel):
            continue
        parser = parser_for(info.path / rel)
        if parser is None:
            continue
        if has_requests and parser is parse_result_json:
            # older runs' per-point convenience copies (bench/<point>.json): frozen at collection time,
            # never read; the points are recomputed from requests.jsonl (_points_from_requests)
            continue
        records[rel] = parser(info.path / rel)
    return records


def _check_file_names(info: RunInfo) -> None:
    """Every file name of the run is UTF-8 text (names are cited on pages and in JSON); one that is not makes
    the run unreadable, in one line that shows its bytes."""
    for rel in info.data_files():
        if text_name(rel) != rel:
            raise StoreError(f"{info.path / text_name(rel)}: the file name is not UTF-8 text; rename it")


def load_run(info: RunInfo) -> RunData:
    _check_file_names(info)
    meta = info.meta or {}
    run = RunData(
        info=info,
        round=normalise_round(meta.get("round")),
        engine=str(meta.get("engine") or ""),
        test=str(meta.get("test") or info.name),
        test_kind=str(meta.get("test_kind") or info.kind or ""),
        cite_root=_cite_root(info),
    )
    run.records = _parse_run(info)
    if info.kind in (COLLECTOR_RUN_KIND, CEILINGS_RUN_KIND):
        run.docs = read_run_docs(info.path, info.data_files())
    return run


def _is_warmup(label: str) -> bool:
    return "warmup" in label.lower()


def _bench_results(run: RunData) -> Iterator[tuple[str, str, BenchResult]]:
    """(file, point label, result) of every result file in the run; a file holding several results
    (GuideLLM: one per benchmark) gives one point each, labelled ``<stem>-<index>``."""
    for rel in sorted(run.records):
        rec = run.records[rel]
        if isinstance(rec, BenchResult):
            yield rel, Path(rel).stem, rec
        elif isinstance(rec, list):
            for i, r in enumerate(x for x in rec if isinstance(x, BenchResult)):
                yield rel, f"{Path(rel).stem}-{i:02d}", r


def _build_points(run: RunData, percentiles: Sequence[float] = metrics.DEFAULT_PERCENTILES) -> None:
    if run.requests[1] is not None:
        run.points = sorted(_points_from_requests(run, percentiles), key=lambda p: p.order)
        return
    sweep_rel, sweep = run.sweep
    by_file: dict[str, SweepPoint] = {}
    if sweep is not None:
        for logged in sweep.points:
            if logged.result_filename:
                by_file[Path(logged.result_filename).name] = logged
    pts: list[BenchPoint] = []
    for rel, label, rec in _bench_results(run):
        sp = by_file.get(Path(rel).name)
        inp = rec.total_input_tokens / rec.completed if rec.total_input_tokens and rec.completed else None
        out_len = None
        src = None
        if sp is not None and sweep_rel is not None:
            out_len = sp.namespace.get("random_output_len")
            src = run.cite(sweep_rel, sp.namespace_line)
        pts.append(
            BenchPoint(
                run=run,
                file=rel,
                result=rec,
                label=label,
                warmup=_is_warmup(label),
                concurrency=rec.max_concurrency,
                input_len_tokens=inp,
                requested_output_len_tokens=int(out_len) if isinstance(out_len, int | float) else None,
                protocol_source=src,
                protocol_borrowed=False,
                sweep_point=sp,
                order=sp.index if sp is not None else -1,
                metric_definition=metrics.definition_of(rec),
            )
        )
    if any(p.sweep_point is None for p in pts):
        # No log position: order by the client's end time (then name), after any logged points.
        base = max((p.order for p in pts), default=-1) + 1
        unlogged = sorted(
            (p for p in pts if p.sweep_point is None), key=lambda p: (p.end_naive_utc_s or 0, p.label)
        )
        for i, p in enumerate(unlogged):
            p.order = base + i
    run.points = sorted(pts, key=lambda p: p.order)


def _points_from_requests(
    run: RunData, percentiles: Sequence[float] = metrics.DEFAULT_PERCENTILES
) -> list[BenchPoint]:
    """A run with requests.jsonl: one point per `point` id, its numbers recomputed from the request records by
    analysis.core.metrics (canonical); kind, warm-up, requested lengths and order from the records (the plan's
    truth, written per request)."""
    rel, log = run.requests
    if rel is None or log is None or not len(log.columns):
        return []
    pts = []
    for point, idx in log.points.items():
        cols = log.point_columns(point)
        assert cols is not None  # a point id of the log's own
        res = metrics_columns.point_result(cols, str(run.info.path / rel), percentiles=percentiles)
        first = log.columns.record(int(idx[0]))
        pts.append(
            BenchPoint(
                run=run,
                file=f"{rel}#{point}",
                result=res,
                label=point,
                warmup=first.phase_kind == "warmup",
                concurrency=first.concurrency,
                # no completed request (a point cut short): the prompt length the collector sent
                input_len_tokens=(
                    res.total_input_tokens / res.completed
                    if res.completed and res.total_input_tokens is not None
                    else float(first.input_len)
                ),
                requested_output_len_tokens=first.max_tokens,
                protocol_source=run.cite(rel, "max_tokens"),
                protocol_borrowed=False,
                sweep_point=None,
                order=first.point_index,
                kind=PHASE_TEST_KIND.get(first.phase_kind, first.phase_kind),
                metric_definition=metrics.CANONICAL,
            )
        )
    return pts


def _borrow_protocol(campaign: Campaign) -> None:
    """Fill the requested lengths of points whose run kept no sweep log from a log that ran the same
    client command: first the same round with the same input length and test kind family, then the
    same test folder name in another round with the same result file name. Marked as borrowed."""
    logged = [p for p in campaign.points() if p.sweep_point is not None]

    def family(kind: str) -> str:
        return "sweep" if kind in ("concurrency_sweep", "engine_comparison") else kind

    for p in campaign.points():
        if p.requested_output_len_tokens is not None or p.input_len_tokens is None:
            continue
        same_round = [
            q
            for q in logged
            if q.run.round == p.run.round
            and family(q.run.test_kind) == family(p.run.test_kind)
            and _namespace(q).get("random_input_len") == round(p.input_len_tokens)
        ]
        other_round = [
            q
            for q in logged
            if q.run.round != p.run.round
            and q.run.test == p.run.test
            and Path(q.file).name == Path(p.file).name
        ]
        for cand in (same_round, other_round):
            if cand:
                q = sorted(cand, key=lambda q: (q.run.name, q.order))[0]
                out_len = _namespace(q).get("random_output_len")
                if isinstance(out_len, int | float):
                    p.requested_output_len_tokens = int(out_len)
                    p.protocol_source = q.protocol_source
                    p.protocol_borrowed = True
                    break


def _namespace(p: BenchPoint) -> dict[str, Any]:
    """The client's arguments (the sweep log's Namespace) of a logged point; {} for one the log does not
    hold."""
    return p.sweep_point.namespace if p.sweep_point is not None else {}


VERIFY_HINT = "analyze reads only runs that verify; --no-verify reads them anyway, marked unverified"


def verify_campaign(raw_roots: Iterable[Path], name: str) -> int:
    """Every run folder of the campaign checked as `collector verify` checks it (seal, manifest, run.json,
    journal); the first problem raises StoreError with verify's own line. Returns the folders checked."""
    n = 0
    for root in raw_roots:
        cdir = Path(root) / name
        if not cdir.is_dir():
            continue
        for run_dir in sorted(p for p in cdir.iterdir() if p.is_dir()):
            report = verify_run(run_dir)
            n += 1
            if not report.ok:
                raise StoreError(f"{report.problems[0].line()} ({VERIFY_HINT})")
    return n


def _broken(run_dir: Path, info: RunInfo | None, err: AnatomyError) -> BrokenRun:
    try:
        state = run_state(run_dir)
    except StoreError:
        state = "unsealed"  # a seal whose manifest cannot be read vouches for nothing
    cite_root = _cite_root(info) if info is not None else run_dir.name
    where = Path(err.path) if isinstance(err, ParseError) else None
    try:
        rel = where.resolve().relative_to(run_dir.resolve()).as_posix() if where else None
    except ValueError:
        rel = None
    line = f":{err.line}" if isinstance(err, ParseError) and err.line is not None else ""
    return BrokenRun(
        name=run_dir.name,
        path=run_dir,
        state=state,
        reason=str(err).splitlines()[0] if str(err) else type(err).__name__,
        engine=((info.meta or {}).get("engine") or None) if info is not None else None,
        cite_root=cite_root,
        source=f"{cite_root}/{rel}{line}" if rel else cite_root,
    )


def load_campaign(
    raw_roots: Iterable[Path],
    name: str,
    verified: bool = True,
    percentiles: Sequence[float] = metrics.DEFAULT_PERCENTILES,
) -> Campaign:
    """The campaign's runs, parsed. A run that cannot be read or parsed (a one-line AnatomyError: a bad
    run.json, a server log no parser recognises, a stream cut mid-line in a sealed run …) becomes a
    ``BrokenRun`` and the others load as usual. ``verified`` records whether ``verify_campaign`` ran first;
    ``percentiles``, the analysis-time set our runs' points are summarised at (a bench file has its own)."""
    runs: list[RunData] = []
    broken: list[BrokenRun] = []
    excluded: dict[str, str] = {}
    for root in raw_roots:
        store = RawStore(root)
        left_out = excluded_runs(Path(root) / name)
        excluded.update(left_out)
        for run_dir in store.run_dirs(name):
            if run_dir.name in left_out:
                continue
            info = None
            try:
                info = open_run(run_dir)
                if (info.meta or {}).get("test_kind") == "documents":
                    continue
                run = load_run(info)
                _build_points(run, percentiles)
                run.state = info.state
            except AnatomyError as err:
                broken.append(_broken(run_dir, info, err))
                continue
            runs.append(run)
    campaign = Campaign(
        name=name,
        runs=sorted((r for r in runs if not is_experiment_run(r.name)), key=lambda r: r.name),
        experiment_runs=sorted((r for r in runs if is_experiment_run(r.name)), key=lambda r: r.name),
        broken=sorted(broken, key=lambda b: b.name),
        verified=verified,
        percentiles=tuple(percentiles),
        excluded=excluded,
    )
    _borrow_protocol(campaign)
    return campaign


def is_experiment_run(name: str) -> bool:
    """The one rule that makes a run an experiment arm: its name starts with one of ``EXPERIMENT_PREFIXES``
    (plans/*-exp-*.toml, *-ladder-*, *-spec-* and *-slots-hist-* name their runs so)."""
    return name.startswith(EXPERIMENT_PREFIXES)


def campaign_names(raw_roots: Iterable[Path]) -> list[str]:
    names: set[str] = set()
    for root in raw_roots:
        if Path(root).is_dir():
            names.update(RawStore(root).campaigns())
    return sorted(names)


def iter_points(campaign: Campaign, include_warmup: bool = False, **kw: Any) -> Iterator[BenchPoint]:
    for p in campaign.points(**kw):
        if include_warmup or not p.warmup:
            yield p
