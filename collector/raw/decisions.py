"""Decisions about sealed runs, kept beside them: ``<raw>/<campaign>/decisions.jsonl``.

A run that should not count (a failed start, a wrong model, a noisy neighbour) is never edited or deleted:
``collector exclude RUN --reason TEXT`` appends one line naming the run, the decision, the reason and when,
and analysis leaves the run out of the campaign's conclusions (``analysis.campaign.load_campaign``), saying
so. ``--include`` appends the opposite decision; the last line about a run wins. The file is append-only like
the runs themselves; ``verify`` checks run folders, and this file is not one.
"""

from __future__ import annotations

import getpass
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collector.raw.errors import StoreError

DECISIONS_FILE = "decisions.jsonl"
RUN_FILE = "run.json"
DECISIONS = ("exclude", "include")


def record_decision(run_dir: Path, decision: str, reason: str) -> str:
    """Append a decision about the run folder ``run_dir`` (``<raw>/<campaign>/<run>``) to its campaign's
    decisions file; return one line saying what was recorded."""
    run_dir = Path(run_dir)
    if decision not in DECISIONS:
        raise StoreError(f"unknown decision {decision!r}; known: {', '.join(DECISIONS)}")
    if not (run_dir / RUN_FILE).is_file():
        raise StoreError(f"{run_dir}: not a run folder (no {RUN_FILE}); give <raw>/<campaign>/<run>")
    if not reason.strip():
        raise StoreError("--reason: say why (it is printed wherever the run is left out)")
    line = {
        "run": run_dir.name,
        "decision": decision,
        "reason": reason.strip(),
        "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "by": _user(),
    }
    path = run_dir.parent / DECISIONS_FILE
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return f"{path}: {decision} {run_dir.parent.name}/{run_dir.name} ({line['reason']})"


def _user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def excluded_runs(campaign_dir: Path) -> dict[str, str]:
    """Run name -> the reason, for every run of the campaign folder whose last decision is ``exclude``.
    A line that is not a decision is an error naming the file and the line (never skipped silently)."""
    path = Path(campaign_dir) / DECISIONS_FILE
    if not path.is_file():
        return {}
    last: dict[str, dict[str, Any]] = {}
    for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            d = json.loads(text)
        except json.JSONDecodeError as err:
            raise StoreError(f"{path}:{i}: not a JSON line ({err.msg})") from None
        if not isinstance(d, dict) or d.get("decision") not in DECISIONS or not isinstance(d.get("run"), str):
            raise StoreError(f"{path}:{i}: not a decision (want run, decision exclude|include, reason)")
        last[d["run"]] = d
    return {run: str(d.get("reason", "")) for run, d in last.items() if d["decision"] == "exclude"}
