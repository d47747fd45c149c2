"""The raw contract on the committed runs: every line of every collector stream under raw/ reads into its
typed record, and the record writes back the very same bytes (what the collector writes is what analysis
reads, and a record type cannot drift from the files already collected)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.raw.errors import ParseError
from collector.raw.jsonl import iter_json_lines
from collector.raw.records import CheckResult, EventRecord, RequestRecord, ScrapeRecord
from collector.raw.store import json_line

RAW = Path(__file__).resolve().parents[1] / "raw"
STREAMS = {"requests.jsonl": RequestRecord, "events.jsonl": EventRecord, "scrapes.jsonl": ScrapeRecord}
FILES = sorted(p for name in STREAMS for p in RAW.glob(f"*/*/{name}"))


def test_the_committed_runs_have_all_three_streams():
    assert {p.name for p in FILES} == set(STREAMS) and len(FILES) >= 3 * 4


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(RAW)))
def test_every_line_reads_and_writes_back_byte_for_byte(path):
    rec_type = STREAMS[path.name]
    lines = path.read_text(encoding="utf-8").splitlines()
    objs = iter_json_lines(path)
    assert len(objs) == len(lines) > 0
    for (i, obj), line in zip(objs, lines, strict=True):
        rec = rec_type.from_obj(obj, path, i)
        assert json_line(rec.to_obj()) == line, f"{path}:{i}"


def test_checks_round_trip_through_their_event():
    events = [
        EventRecord.from_obj(o) for p in FILES if p.name == "events.jsonl" for _, o in iter_json_lines(p)
    ]
    checks = [e for e in events if e.kind == "check"]
    assert checks and any(e.get("facts") for e in checks) and any(e.get("point") is None for e in checks)
    for e in checks:
        assert CheckResult.from_event(e).event_fields() == e.fields


def test_a_bad_value_is_one_line_naming_file_line_and_key():
    obj = iter_json_lines(next(p for p in FILES if p.name == "requests.jsonl"))[0][1]
    with pytest.raises(ParseError, match=r"^requests\.jsonl:7: key 'worker' should be an integer"):
        RequestRecord.from_obj({**obj, "worker": "0"}, "requests.jsonl", 7)
