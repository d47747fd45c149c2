"""``events.jsonl``: what happened during a collector run, one JSON object per line, in order.

Every line: ``v`` (1), ``kind``, ``mono_ns`` and ``unix_ns`` (collector clocks), plus fields of that kind:

- ``run_start`` (plan, campaign, run, server_mode), ``run_end`` (status, reason);
- ``server_start`` (argv or url), ``server_healthy`` (waited_s), ``server_exit`` (code, expected);
- ``check`` (scope: startup|point, name, ok: true|false|null for not applicable, detail, point);
- ``phase_start`` / ``phase_end`` (phase, phase_kind); ``point_start`` (point, phase, concurrency, requests,
  input_len, output_len, seed) / ``point_end`` (point, sent, finished, ok, errors {kind: n}, aborted);
- ``fault`` (what, detail), ``abort`` (reason), ``metrics_unreachable`` / ``metrics_back`` (url, status, error);
- ``drain`` (seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.parse.requests_jsonl import iter_json_lines
from collector.raw.errors import ParseError

KINDS = frozenset({
    "run_start", "run_end", "server_start", "server_healthy", "server_exit", "check", "phase_start", "phase_end",
    "point_start", "point_end", "fault", "abort", "metrics_unreachable", "metrics_back", "drain",
})  # fmt: skip


@dataclass(frozen=True)
class EventRecord:
    kind: str
    mono_ns: int
    unix_ns: int
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@dataclass(frozen=True)
class CheckResult:
    scope: str
    name: str
    ok: bool | None
    detail: str
    point: str | None


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def parse_events_jsonl(path: str | Path, allow_torn_tail: bool = False) -> list[EventRecord]:
    out = []
    for i, obj in iter_json_lines(path, allow_torn_tail):
        if not isinstance(obj, dict) or obj.get("v") != 1:
            raise ParseError(path, i, "expected an event object of version 1")
        kind = obj.get("kind")
        if kind not in KINDS:
            raise ParseError(path, i, f"unknown event kind {kind!r}")
        if not (_int(obj.get("mono_ns")) and _int(obj.get("unix_ns"))):
            raise ParseError(path, i, "mono_ns and unix_ns should be integers")
        if kind == "check" and (
            obj.get("ok") not in (True, False, None) or not isinstance(obj.get("name"), str)
        ):
            raise ParseError(path, i, "a check needs a name and ok: true, false or null")
        rest = {k: v for k, v in obj.items() if k not in ("v", "kind", "mono_ns", "unix_ns")}
        out.append(EventRecord(kind, obj["mono_ns"], obj["unix_ns"], rest))
    return out


def checks(events: list[EventRecord]) -> list[CheckResult]:
    """Every recorded check, in order."""
    return [
        CheckResult(e.get("scope", ""), e.get("name"), e.get("ok"), e.get("detail", ""), e.get("point"))
        for e in events
        if e.kind == "check"
    ]
