"""What a server says its KV pool holds, and the one tolerance a pool check allows: shared by the check of
imported runs (``kv``: vLLM's start-up log against the logged pool bytes) and of ours (``own``: exactly,
from the server's flags and environment).

A number an engine prints with two decimals is known to ± half a unit in the last place
(``half_unit_pct``); a pool computed from a logged, rounded GiB is known only to the token range that GiB
covers (``logged_gib_tolerance_pct``).
"""

from __future__ import annotations

from analysis.core import theory
from analysis.loading.campaign import RunData

# numbers the engines print with two decimals are known to ± half a unit in the last place
LOG_DECIMALS_HALF = 0.005


def half_unit_pct(value: float, half_unit: float = LOG_DECIMALS_HALF) -> float:
    """Tolerance of a number printed to two decimals, %: 0.005 ÷ value × 100."""
    return half_unit / value * 100.0


def half_range_pct(lo: float, hi: float, center: float) -> float:
    """Tolerance of a value known only to a range, %: (hi − lo)/2 ÷ center × 100."""
    return (hi - lo) / 2 / center * 100.0


def logged_gib_tolerance_pct(
    logged_gib: float, kv_bytes_per_token: float, block_size: int, center_tokens: float
) -> float:
    """Tolerance of a pool computed from a logged GiB, %: half the token range that GiB covers
    (theory.vllm_tokens_range_for_logged_gib) ÷ the theory's pool, tokens."""
    lo, hi = theory.vllm_tokens_range_for_logged_gib(logged_gib, kv_bytes_per_token, block_size)
    return half_range_pct(lo, hi, center_tokens)


def server_argv(run: RunData) -> tuple[list[str] | None, str | None]:
    """The server's command line as the collector started it (events.jsonl `server_start`), and its
    citation."""
    rel, log = run.events
    if rel is None or log is None:
        return None, None
    for i, e in enumerate(log.records, 1):
        argv = e.get("argv")
        if e.kind == "server_start" and isinstance(argv, list):
            return [str(a) for a in argv], run.cite(rel, i)
    return None, None


def has_flag(argv: list[str], *names: str) -> bool:
    return any(a in names for a in argv)


def pool_tokens_measured(run: RunData) -> tuple[int | None, str | None]:
    """What a run's server says its KV pool holds, tokens: vLLM's logged size; llama.cpp's slots ×
    n_ctx_slot."""
    rel, log = run.server_log
    if rel is None or log is None:
        return None, None
    if run.engine == "vllm" and getattr(log, "kv_cache_tokens", None) is not None:
        return log.kv_cache_tokens, run.cite(rel, log.lines.get("kv_cache_tokens"))
    if run.engine == "llamacpp" and getattr(log, "n_slots", None) and getattr(log, "n_ctx_slot", None):
        return log.n_slots * log.n_ctx_slot, run.cite(rel, log.lines.get("n_slots"))
    return None, None


def max_concurrency_measured(run: RunData) -> tuple[float | None, str | None]:
    """Full-length requests the server says it holds at once: vLLM's logged maximum concurrency; llama.cpp's
    slots."""
    rel, log = run.server_log
    if rel is None or log is None:
        return None, None
    if run.engine == "vllm" and getattr(log, "max_concurrency_x", None) is not None:
        return log.max_concurrency_x, run.cite(rel, log.lines.get("max_concurrency_x"))
    if run.engine == "llamacpp" and getattr(log, "n_slots", None):
        return float(log.n_slots), run.cite(rel, log.lines.get("n_slots"))
    return None, None
