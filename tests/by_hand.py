"""Latencies written out here from requests.jsonl's raw fields, independently of analysis.metrics, for the
tests that check the pipeline against them (a plain helper module, not a test module)."""

from __future__ import annotations

import json
from pathlib import Path


def request_lines(run_dir: Path) -> list[dict]:
    """Every line of ``run_dir/requests.jsonl`` as a dict, blank lines skipped."""
    text = (run_dir / "requests.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def ttft_ms(line: dict) -> float | None:
    """Time to first token, ms: the first chunk that carried a token (a role-only or empty chunk is none)
    minus the send time, on the monotonic clock; None for a failed request or one that got no token."""
    toks = [t for t, n in zip(line["chunk_mono_ns"], line["chunk_tokens"], strict=True) if n > 0]
    return (toks[0] - line["send_mono_ns"]) / 1e6 if toks and line["error"] is None else None
