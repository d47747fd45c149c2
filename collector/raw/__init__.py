"""The raw contract (layer 0): what the collector writes under ``raw/`` and what analysis reads back.

``errors`` (the one error root), ``store`` (the append-only run folders), ``plan`` (the plan schema, kept as
``plan.toml`` in each run), ``records`` (one typed record per line of each stream the collector writes) and
``jsonl`` (reading those streams). Nothing here imports from above this package.
"""
