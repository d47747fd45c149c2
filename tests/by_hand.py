"""Latencies written out here from requests.jsonl's raw fields, independently of analysis.core.metrics, for
the
tests that check the pipeline against them (a plain helper module, not a test module)."""

from __future__ import annotations

import json
import statistics
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


def itls_ms(line: dict) -> list[float]:
    """Inter-token intervals, ms (the canonical, chunk-aware definition): between consecutive chunks that
    carried tokens, the gap ÷ the later chunk's tokens, once per token; the first chunk's extra tokens arrived
    with it (intervals of 0); a chunk carrying none (llama.cpp's closing chunk) is no interval."""
    toks = [(t, n) for t, n in zip(line["chunk_mono_ns"], line["chunk_tokens"], strict=True) if n > 0]
    out = [0.0] * (toks[0][1] - 1) if toks else []
    for (a, _), (b, n) in zip(toks, toks[1:], strict=False):
        out += [(b - a) / 1e6 / n] * n
    return out


def p50_itl_ms(run_dir: Path, concurrency: int) -> float:
    """The median of every inter-token interval of the completed requests at one closed-loop sweep point."""
    gaps = [
        g
        for r in request_lines(run_dir)
        if r["phase_kind"] == "concurrency" and r["concurrency"] == concurrency and r["error"] is None
        for g in itls_ms(r)
    ]
    return statistics.median(gaps)
