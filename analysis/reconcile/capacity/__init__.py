"""Capacity: what the KV cache and the card's memory hold, against theory.

- ``kv``: imported runs' KV pool (vLLM's start-up log vs the logged pool bytes), the length sweep's KV
  linearity, predicted vs measured KV usage;
- ``own``: our own runs' pool, exactly, from the server's flags and environment;
- ``pool``: what both check with: what a server says its pool holds, and the one tolerance of a pool known
  from a rounded log;
- ``memory``: where the memory goes (vLLM's ledger and a hand estimate against the logged pool; llama.cpp's
  buffers);
- ``arith``: the arithmetic a reader does with an imported round's logged pool (requests that fit, MHA
  instead of GQA, what an overload needs);
- ``prefix_cache``: the KV blocks reused across requests (prefix-cache hit rate).

Each section module exposes ``run(s: SectionInput) -> Section``; analysis.pipeline.analyze.SECTIONS orders
them.
"""

from analysis.reconcile.capacity.pool import max_concurrency_measured, pool_tokens_measured, server_argv
from collector.protocol.checks import (
    flag_value as flag,  # the server's flag values, as the collector's checks read them
)

__all__ = ["flag", "max_concurrency_measured", "pool_tokens_measured", "server_argv"]
