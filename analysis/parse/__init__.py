"""One parser per raw file kind; each returns typed records and raises ``ParseError`` on bad input.

This module also holds the few text helpers every parser shares (read, decode, split into numbered lines)
and ``parser_for(path)``, a plain table from file names to parsers.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector.raw.errors import ParseError

# --- shared text helpers -------------------------------------------------------------------------------


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, or ParseError naming the OS problem (missing file, directory, permissions)."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ParseError(path, None, f"cannot read file ({err.strerror or err})") from None


def decode_text(data: bytes, path: str | Path, *, errors: str = "strict") -> str:
    """UTF-8 text; an invalid byte is a ParseError on the line that holds it (never a silent U+FFFD)."""
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ParseError(
            path, line, f"invalid UTF-8 byte 0x{data[err.start]:02x} at byte {err.start}"
        ) from None


def split_lines(
    data: bytes, path: str | Path, *, errors: str = "strict", allow_empty: bool = False
) -> list[str]:
    """Lines split on ``\\n`` only (``\\r`` stays inside a line: tqdm bars are one line with many ``\\r``).

    A text file written by a process that finished ends with a newline; a last line without one means the
    file was cut (copy interrupted, disk full), so it is refused rather than half-read.
    """
    if not data:
        if allow_empty:
            return []
        raise ParseError(path, None, "empty file")
    text = decode_text(data, path, errors=errors)
    if not text.endswith("\n"):
        n = text.count("\n") + 1
        raise ParseError(path, n, "last line has no newline: the file looks truncated")
    return text[:-1].split("\n")


def clip(text: str, limit: int = 80) -> str:
    """A short, printable excerpt of an offending line for error messages."""
    text = text.replace("\r", "\\r").replace("\t", "\\t")
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
)

# (file-name pattern, "module:function"), first match wins. Specific names before generic ones.
_TABLE: tuple[tuple[str, str], ...] = (
    ("requests.jsonl", "requests_jsonl:parse_requests_jsonl"),  # the collector's own streams
    ("scrapes.jsonl", "scrapes_jsonl:parse_scrapes_jsonl"),
    ("events.jsonl", "events_jsonl:parse_events_jsonl"),
    ("fingerprint*.txt", "fingerprint_txt:parse_fingerprint"),
    ("metrics*.csv", "sampler_csv:parse_sampler_csv"),
    ("metrics.log", "prometheus:parse_prometheus"),
    ("*.prom", "prometheus:parse_prometheus"),
    ("sweep*.log", "sweep_log:parse_sweep_log"),
    ("*llamacpp*server*.log", "llamacpp_log:parse_llamacpp_log"),
    ("*llama-server*.log", "llamacpp_log:parse_llamacpp_log"),
    ("*vllm*server*.log", "vllm_log:parse_vllm_log"),
    ("*server*.log", "__init__:parse_server_log"),
    ("*.json", "bench_json:parse_bench_json"),
)


def parser_for(path: str | Path) -> Callable[[str | Path], Any] | None:
    """The parser for a raw file, chosen by its name only; None for files no parser covers."""
    name = Path(path).name
    if any(fnmatch.fnmatchcase(name, pat) for pat in _NO_PARSER):
        return None
    if Path(path).parent.name == "fingerprint":  # the collector's verbatim command outputs: documents
        return None
    for pattern, target in _TABLE:
        if fnmatch.fnmatchcase(name, pattern):
            module_name, func = target.split(":")
            if module_name == "__init__":
                return globals()[func]
            import importlib

            module = importlib.import_module(f"analysis.parse.{module_name}")
            return getattr(module, func)
    return None


def parse_server_log(path: str | Path) -> Any:
    """A server log whose name does not say the engine (``server.log``): the first lines tell.

    vLLM prefixes its lines with ``(APIServer pid=N)`` / ``(EngineCore pid=N)`` or logs ``vLLM``; llama.cpp
    logs ``llama_server`` / ``load_model`` lines. Neither found is a ParseError, not a guess.
    """
    from analysis.parse import llamacpp_log, vllm_log

    head = read_bytes(path)[:65536].decode("utf-8", errors="replace")
    vllm_marks = ("(APIServer pid=", "(EngineCore", "LLM engine (v", "non-default args:", "vLLM API server")
    llama_marks = ("llama_server", "load_model:", "llama_model_loader", "llama_context:")
    if any(m in head for m in vllm_marks):
        return vllm_log.parse_vllm_log(path)
    if any(m in head for m in llama_marks):
        return llamacpp_log.parse_llamacpp_log(path)
    raise ParseError(
        path, None, "cannot tell which engine wrote this server log (no vLLM or llama.cpp lines)"
    )
