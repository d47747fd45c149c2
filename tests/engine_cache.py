"""Where the tests find the real engines (`nox -s engines` builds them), and what happens when they are
missing."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from lab.engines import EnginePaths, engine_paths

REPO = Path(__file__).resolve().parent.parent
# the engines' environment: no downloads, no usage reports
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
CACHE = Path(os.environ.get("ENGINES_CACHE", REPO / ".engines"))


def paths() -> EnginePaths:
    return engine_paths(CACHE)


def require(*artifacts: Path) -> None:
    """Skip when an engine artifact is missing; in CI (env CI set) that is a failure, never a silent skip."""
    missing = [p for p in artifacts if not p.exists()]
    if not missing:
        return
    msg = (
        f"engine cache incomplete ({missing[0]} missing): run `python -m lab.engines prepare "
        "--cache .engines`"
    )
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)


class Server:
    """A server process in its own session (its log in ``log``), stopped with its whole group."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._f = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd, stdout=self._f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def wait_healthy(self, base: str, deadline_s: float) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < deadline_s:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"server exited with {self.proc.returncode} while starting; log {self.log}:\n"
                    + self.log.read_text(errors="replace")[-3000:]
                )
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    return time.monotonic() - t0
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        pytest.fail(f"server not healthy after {deadline_s:.0f} s; log {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._f.close()
