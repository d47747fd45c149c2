"""Engines: how the engines compare and which to choose — one concept, three sections.

- ``points``: per sweep point of each engine, throughput, ITL and the roofline floor; the byte ledger; per
  round the roofline achievement, marginal cost per request, single-stream step ratio, throughput crossover
  and ratio, and the workload shortfall (section ``engines``);
- ``depth``: per series the per-slot decode rate and unexplained throughput dips, the prefill growth and
  queue share, the KV pool in blocks (section ``engines_depth``);
- ``selection``: the Pareto curves of output tokens/s against p99 TTFT, the budget where the better engine
  changes, the best series per budget and each series' advantages (section ``selection``).

Each module keeps its section's ``run(s: SectionInput) -> Section``; analysis.pipeline.analyze.SECTIONS calls
them.
"""
