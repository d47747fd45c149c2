"""Start, attach to, and stop an inference server; one small adapter per engine.

A started server runs in its own process group (so Ctrl-C in the terminal reaches only the collector, which
then stops the server deliberately) and its stdout+stderr go straight into the run's ``server.log`` stream,
chunk by chunk as they arrive, never collected in memory. A watcher thread notices the server dying.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from collector.raw.errors import RunError
from collector.raw.plan import ServerPlan

_READ = 1 << 16


@dataclass(frozen=True)
class Adapter:
    """What differs between engines: the command line, request extras, and how to ask for its version."""

    engine: str

    def command(self, sp: ServerPlan) -> list[str]:
        raise NotImplementedError

    def request_extra(self) -> dict[str, Any]:
        return {}

    def version_command(self, sp: ServerPlan) -> list[str] | None:
        return None

    def python(self, sp: ServerPlan) -> str | None:
        """The Python whose packages the engine runs on (for ``pip freeze``); None for a native binary."""
        return None


class LlamaCppAdapter(Adapter):
    def command(self, sp: ServerPlan) -> list[str]:
        # --metrics: the sampler needs /metrics; --alias: requests name the model like on vLLM.
        return [
            str(sp.binary),
            "-m", str(sp.model),
            "--host", "127.0.0.1",
            "--port", str(sp.port),
            "--alias", sp.served_model_name,
            "--metrics",
            *sp.args,
        ]  # fmt: skip

    def request_extra(self) -> dict[str, Any]:
        # timings_per_token: a cumulative predicted_n on every event, the exact token count of each chunk.
        # cache_prompt false: without it a slot reuses the KV of whatever prefix the new prompt shares with the
        # slot's previous one (seen: 1 token, when two random prompts began with the same id), --cache-ram 0
        # and --slot-prompt-similarity 0 notwithstanding.
        return {"timings_per_token": True, "cache_prompt": False}

    def version_command(self, sp: ServerPlan) -> list[str] | None:
        return [str(sp.binary), "--version"] if sp.binary else None


class VllmAdapter(Adapter):
    def command(self, sp: ServerPlan) -> list[str]:
        # ``python -m`` rather than the ``vllm`` script: the CPU wheel's dist name breaks the script's lookup.
        return [
            str(sp.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(sp.model),
            "--served-model-name", sp.served_model_name,
            "--host", "127.0.0.1",
            "--port", str(sp.port),
            *sp.args,
        ]  # fmt: skip

    def request_extra(self) -> dict[str, Any]:
        return {"stream_options": {"continuous_usage_stats": True}}

    def version_command(self, sp: ServerPlan) -> list[str] | None:
        return [str(sp.python), "-c", "import vllm; print(vllm.__version__)"] if sp.python else None

    def python(self, sp: ServerPlan) -> str | None:
        return str(sp.python) if sp.python else None


ADAPTERS: dict[str, Adapter] = {"llamacpp": LlamaCppAdapter("llamacpp"), "vllm": VllmAdapter("vllm")}


def adapter_for(engine: str) -> Adapter:
    return ADAPTERS[engine]


def server_env(sp: ServerPlan) -> dict[str, str]:
    return {**os.environ, **sp.env}


class ServerProcess:
    """A started server (or, with ``attach``, a handle on one that runs elsewhere)."""

    def __init__(self, sp: ServerPlan, log_stream: Any | None, on_exit: Callable[[int], None]):
        self.sp = sp
        self.adapter = adapter_for(sp.engine)
        self.command = None if sp.attach else self.adapter.command(sp)
        self._log_stream = log_stream
        self._on_exit = on_exit
        self.proc: subprocess.Popen | None = None
        self.stopping = False
        self.exit_code: int | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self.command is None:
            return
        exe = Path(self.command[0])
        if not exe.exists():
            raise RunError(f"{exe}: server executable not found (check [server] in the plan)")
        try:
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=server_env(self.sp),
                start_new_session=True,
                bufsize=0,
            )
        except OSError as err:
            raise RunError(f"{exe}: cannot start server: {err.strerror}") from err
        for target, name in ((self._pump_log, "server-log"), (self._watch, "server-watch")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _pump_log(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, _READ):
            self._log_stream.write(chunk)

    def _watch(self) -> None:
        assert self.proc is not None
        rc = self.proc.wait()
        self.exit_code = rc
        if not self.stopping:
            self._on_exit(rc)

    @property
    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def wait_healthy(self, timeout_s: float, abort: Callable[[], str | None] = lambda: None) -> float:
        """Poll ``/health`` until it answers 200; return seconds waited. The server dying or the timeout
        passing is a RunError naming what happened."""
        url = f"{self.sp.base_url}/health"
        t0 = time.monotonic()
        last = "no answer yet"
        with httpx.Client(timeout=5.0) as client:
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RunError(
                        f"server exited with code {self.proc.returncode} during start-up (see server.log)"
                    )
                if (why := abort()) is not None:
                    raise RunError(f"start-up aborted: {why}")
                try:
                    r = client.get(url)
                    if r.status_code == 200:
                        return time.monotonic() - t0
                    last = f"HTTP {r.status_code}"
                except httpx.HTTPError as err:
                    last = type(err).__name__
                if time.monotonic() - t0 > timeout_s:
                    raise RunError(f"{url}: not healthy after {timeout_s:.0f} s (last: {last})")
                time.sleep(0.5)

    def stop(self) -> int | None:
        """SIGTERM the server's process group, SIGKILL whatever is left after ``stop_timeout_s``."""
        self.stopping = True
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        if self.proc.poll() is None:
            _killpg(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.sp.stop_timeout_s)
            except subprocess.TimeoutExpired:
                _killpg(pgid, signal.SIGKILL)
                self.proc.wait()
        # children (vLLM's engine core) may outlive the leader: the group goes too
        deadline = time.monotonic() + self.sp.stop_timeout_s
        while _group_alive(pgid) and time.monotonic() < deadline:
            _killpg(pgid, signal.SIGTERM)
            time.sleep(0.2)
        if _group_alive(pgid):
            _killpg(pgid, signal.SIGKILL)
        for t in self._threads:
            t.join(timeout=10)
        return self.proc.returncode


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run_capture(
    cmd: list[str], timeout_s: float = 120.0, env: dict[str, str] | None = None
) -> tuple[int | None, str]:
    """Run a short command for the fingerprint: (exit code or None, stdout+stderr text)."""
    try:
        p = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            stdin=subprocess.DEVNULL,
            errors="replace",
        )
        return p.returncode, p.stdout + (p.stderr if p.stderr else "")
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{type(err).__name__}: {err}"


def collector_python() -> str:
    return sys.executable
