"""Fixtures shared by the test modules: pytest hands them over by name, so no test module imports another.

- ``make_plan``: a `collector run` plan against the fault server started as if it were llama-server;
  ``local_plan`` / ``long_sweep``: a shipped CPU plan pointed at the engine cache (for the real engines);
- ``fault_server``: start in-process fault servers, all stopped when the test ends;
- ``engines``: the paths of the real engines and tiny models (`nox -s engines` builds them);
- ``reference_raw``: a raw root holding the reference campaign, imported once per test session.

The plain helper modules beside this file stay modules (no tests in them): seed.py (where the reference
campaign is), engine_cache.py (the engine cache and what a missing artifact means), fault_server.py (the
fault server, also run as a process), loopback.py (a free port), synthetic_gpu.py (the synthetic H200-like
campaign), browser.py (the site build, served, and Chromium).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from collector.protocol.importer import import_results
from lab.engines import EnginePaths
from tests import engine_cache
from tests.fault_server import FaultServer
from tests.loopback import free_port
from tests.seed import SEED

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_CAMPAIGN = "rtx4090-qwen2.5-7b"
TWO_POINTS = "[{concurrency = 1, requests = 3, seed = 11}, {concurrency = 4, requests = 12, seed = 12}]"


def _fake_plan(
    tmp: Path,
    server_args=(),
    points: str = TWO_POINTS,
    output_len: int = 16,
    extra: str = "",
    sampling: str = "interval_s = 0.2",
) -> Path:
    """Write ``tmp/fake.toml``: campaign "fake", run "r", the fault server (tests/fault_server.py) as the
    llama-server binary with ``server_args`` added, a warmup phase and one concurrency sweep of ``points``."""
    fake = tmp / "fake-llama-server"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {ROOT / "tests" / "fault_server.py"} "$@"\n')
    fake.chmod(0o755)
    (tmp / "tiny.gguf").write_bytes(b"")  # the fake server reads no model; pre-flight wants the file to exist
    args = ["--cache-ram", "0", "--slot-prompt-similarity", "0", "--token-ms", "2", *server_args]
    plan = tmp / "fake.toml"
    plan.write_text(f"""
campaign = "fake"
run = "r"
[server]
engine = "llamacpp"
binary = "{fake}"
model = "{tmp / "tiny.gguf"}"
port = {free_port()}
args = {json.dumps(args)}
startup_timeout_s = 30
stop_timeout_s = 5
[model]
config = "Qwen2.5-7B-Instruct"
gpu = "rtx4090"
token_id_range = [32, 127]
[sampling]
{sampling}
[load]
drain_s = 0.1
request_timeout_s = 20
read_timeout_s = 10
{extra}
[[phase]]
name = "warmup"
kind = "warmup"
concurrency = 2
requests = 2
input_len = 8
output_len = 4
seed = 1
[[phase]]
name = "sweep"
kind = "concurrency"
input_len = 24
output_len = {output_len}
points = {points}
""")
    return plan


@pytest.fixture(scope="session")
def make_plan() -> Callable[..., Path]:
    """``make_plan(tmp, server_args=(), points=..., output_len=16, extra="", sampling=...)`` → the plan's
    path."""
    return _fake_plan


def _local_plan(tmp: Path, shipped: str, edits: dict[str, str] | None = None) -> Path:
    """The shipped plan with the cache paths made absolute and a free port (nothing else changed but
    ``edits``, each old text required to be there)."""
    text = (ROOT / "plans" / shipped).read_text()
    text = text.replace('".engines/', f'"{engine_cache.CACHE}/')
    text = re.sub(r"(?m)^port = \d+", f"port = {free_port()}", text)
    for old, new in (edits or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    p = tmp / shipped
    p.write_text(text)
    return p


@pytest.fixture(scope="session")
def local_plan() -> Callable[..., Path]:
    """``local_plan(tmp, "cpu-tiny-llamacpp.toml", edits=None)`` → the plan's path."""
    return _local_plan


@pytest.fixture(scope="session")
def long_sweep() -> dict[str, str]:
    """``local_plan`` edits for one long point in the CPU llama.cpp plan, so a fault lands inside it."""
    return {
        "{ concurrency = 1, requests = 3, seed = 101 },": "{ concurrency = 2, requests = 200, seed = 101 },"
    }


@pytest.fixture
def fault_server() -> Iterator[Callable[..., FaultServer]]:
    """``fault_server(**kw)`` starts ``FaultServer(**kw)`` in-process; every one started is stopped at the end
    (stopping one the test stopped already is harmless)."""
    started: list[FaultServer] = []

    def start(**kw) -> FaultServer:
        s = FaultServer(**kw).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def engines() -> EnginePaths:
    """Where the real engines and tiny models are (use ``engine_cache.require`` on what a test needs)."""
    return engine_cache.paths()


@pytest.fixture(scope="session")
def reference_raw(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A raw root holding the reference campaign as ``rtx4090-qwen2.5-7b``, imported (byte-identical) once per
    session and only read after; None where the campaign is not beside the checkout (the modules that need it
    skip on ``tests.seed.SEED``; test_seed_present fails in CI)."""
    if not SEED.is_dir():
        return None
    raw = tmp_path_factory.mktemp("reference-raw")
    list(import_results(SEED, REFERENCE_CAMPAIGN, raw))
    return raw
