"""One parser per raw file kind; each returns typed records and raises ``ParseError`` on bad input.

This module holds ``parser_for(path)``, a plain table from file names to parsers. The text helpers the
parsers share are in ``analysis.parse.text`` (and ``collector.raw.jsonl`` for reading bytes).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from pathlib import Path
from typing import Any

from analysis.parse import (
    events_jsonl,
    fingerprint_txt,
    llama_bench,
    llamacpp_log,
    peers,
    prometheus,
    requests_jsonl,
    sampler_csv,
    scrapes_jsonl,
    sweep_log,
    vllm_log,
)
from collector.raw.errors import ParseError

# --- registry ------------------------------------------------------------------------------------------

# Store bookkeeping and documents: no parser (they are not measurement files).
_NO_PARSER = (
    "run.json",
    "journal.jsonl",
    "manifest.json",
    "SEALED",
    "prediction.json",
    "plan.json",
    "plan.toml",
    "model-config.json",
    "ceilings.json",
    "*.md",
    "*.tsv",
    # AIPerf's companions of profile_export_aiperf.json: inputs, per-record and CSV exports, readiness mark
    "inputs.json",
    ".aiperf_results_ready.json",
    "profile_export*.jsonl",
    "profile_export*.csv",
    "profile_export*.txt",
)


def parser_for(path: str | Path) -> Callable[[str | Path], Any] | None:
    """The parser for a raw file, chosen by its name only; None for files no parser covers."""
    name = Path(path).name
    if any(fnmatch.fnmatchcase(name, pat) for pat in _NO_PARSER):
        return None
    if Path(path).parent.name == "fingerprint":  # the collector's verbatim command outputs: documents
        return None
    for pattern, parser in _TABLE:
        if fnmatch.fnmatchcase(name, pattern):
            return parser
    return None


def parse_server_log(path: str | Path) -> Any:
    """A server log whose name does not say the engine (``server.log``): the first lines tell.

    vLLM prefixes its lines with ``(APIServer pid=N)`` / ``(EngineCore pid=N)`` or logs ``vLLM``; llama.cpp
    logs ``llama_server`` / ``load_model`` lines. Neither found is a ParseError, not a guess.
    """
    try:
        with open(path, "rb") as f:  # the head only: the parser then streams the whole log
            head = f.read(65536).decode("utf-8", errors="replace")
    except OSError as err:
        raise ParseError(path, None, f"cannot read file ({err.strerror or err})") from None
    vllm_marks = ("(APIServer pid=", "(EngineCore", "LLM engine (v", "non-default args:", "vLLM API server")
    llama_marks = ("llama_server", "load_model:", "llama_model_loader", "llama_context:")
    if any(m in head for m in vllm_marks):
        return vllm_log.parse_vllm_log(path)
    if any(m in head for m in llama_marks):
        return llamacpp_log.parse_llamacpp_log(path)
    raise ParseError(
        path, None, "cannot tell which engine wrote this server log (no vLLM or llama.cpp lines)"
    )


# (file-name pattern, parser), first match wins. Specific names before generic ones.
_TABLE: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("requests.jsonl", requests_jsonl.parse_requests_jsonl),  # the collector's own streams
    ("scrapes.jsonl", scrapes_jsonl.parse_scrapes_jsonl),
    ("events.jsonl", events_jsonl.parse_events_jsonl),
    ("llama-bench*.jsonl", llama_bench.parse_llama_bench_jsonl),  # collector.protocol.stepcost
    ("fingerprint*.txt", fingerprint_txt.parse_fingerprint),
    ("metrics*.csv", sampler_csv.parse_sampler_csv),
    ("metrics.log", prometheus.parse_prometheus),
    ("*.prom", prometheus.parse_prometheus),
    ("sweep*.log", sweep_log.parse_sweep_log),
    ("*llamacpp*server*.log", llamacpp_log.parse_llamacpp_log),
    ("*llama-server*.log", llamacpp_log.parse_llamacpp_log),
    ("*vllm*server*.log", vllm_log.parse_vllm_log),
    ("*server*.log", parse_server_log),
    ("*.json", peers.parse_result_json),  # vllm bench serve's, AIPerf's or GuideLLM's, told by content
)
