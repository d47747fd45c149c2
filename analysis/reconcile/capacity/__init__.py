"""Capacity: what the KV cache and the card's memory hold, against theory.

- ``kv``: imported runs' KV pool (vLLM's start-up log vs the logged pool bytes), the length sweep's KV
  linearity, predicted vs measured KV usage;
- ``own``: our own runs' pool, exactly, from the server's flags and environment;
- ``pool``: what both check with: what a server says its pool holds, and the one tolerance of a pool known
  from a rounded log;
- ``memory``: the card's memory budget (weights, KV pool, the rest);
- ``arith``: the capacity arithmetic per engine (concurrent requests of a length that fit the pool);
- ``prefix_cache``: the KV blocks reused across requests (prefix-cache hit rate).

Each section module exposes ``run(s: SectionInput) -> Section``; analysis.pipeline.SECTIONS orders them.
"""

from analysis.reconcile.capacity.pool import max_concurrency_measured, pool_tokens_measured, server_argv
from collector.checks import (
    flag_value as flag,  # the server's flag values, as the collector's checks read them
)

__all__ = ["flag", "max_concurrency_measured", "pool_tokens_measured", "server_argv"]
