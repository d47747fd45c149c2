"""Start, attach to, and stop an inference server; one small adapter per engine.

A started server runs in its own process group (so Ctrl-C in the terminal reaches only the collector, which
then stops the server deliberately) and its stdout+stderr go straight into the run's ``server.log`` stream,
chunk by chunk as they arrive, never collected in memory. A watcher thread notices the server dying.

The server never outlives the collector (a server left running would block the next run's port, and one that
answers on it would be measured as if it were the new run's server):

- the server gets ``PR_SET_PDEATHSIG`` (SIGTERM) on Linux: the kernel signals it when the collector dies,
  even by SIGKILL;
- that reaches only the direct child, not what it spawns (vLLM's engine core), so a small watchdog process
  holds a pipe from the collector: when the pipe hits end-of-file without the "released" byte (the collector
  died), it stops the server's whole process group (SIGTERM, then SIGKILL after ``stop_timeout_s``);
- a record of the running server (pid, start time, process group, the collector's pid) lives in a state
  folder *outside* the raw store (``$ANATOMY_STATE_DIR``, else ``$XDG_RUNTIME_DIR/inference-anatomy``, else
  ``/tmp/inference-anatomy-<uid>``): raw/ is append-only and every file of a run is sealed into its manifest,
  while a pid is only meaningful until the next reboot — the state folder is where such a thing belongs. The
  next ``collector run`` on the same port stops a recorded server whose collector is gone (if both guards
  above were defeated, e.g. the watchdog was killed too) before it checks the port;
- after start-up, the process listening on the port must be in the started server's process group
  (``/proc/net/tcp`` inode → ``/proc/<pid>/fd``): an orphan that answers ``/health`` is refused, not measured.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from collector.protocol import bounded_http
from collector.raw.errors import RunError
from collector.raw.plan import ServerPlan

_READ = 1 << 16
_TAIL_BYTES = 4096  # how much of the log's end is kept in memory for the start-up display
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@dataclass(frozen=True)
class Adapter:
    """What differs between engines: the command line, request extras, and how to ask for its version."""

    engine: str

    def command(self, sp: ServerPlan) -> list[str]:
        raise NotImplementedError

    def request_extra(self, prefix_cache: str = "off") -> dict[str, Any]:
        """Fields every request of this engine adds; ``prefix_cache`` is the plan's ``[server] prefix_cache``
        (an engine with a per-request cache switch sets it from that)."""
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
            "-m",
            str(sp.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(sp.port),
            "--alias",
            sp.served_model_name,
            "--metrics",
            *sp.args,
        ]

    def request_extra(self, prefix_cache: str = "off") -> dict[str, Any]:
        # timings_per_token: a cumulative predicted_n on every event, the exact token count of each chunk.
        # cache_prompt false unless the plan lets the cache work: without it a slot reuses the KV of whatever
        # prefix the new prompt shares with the slot's previous one (seen: 1 token, when two random prompts
        # began with the same id), --cache-ram 0 and --slot-prompt-similarity 0 notwithstanding.
        return {"timings_per_token": True, "cache_prompt": prefix_cache != "off"}

    def version_command(self, sp: ServerPlan) -> list[str] | None:
        return [str(sp.binary), "--version"] if sp.binary else None


class VllmAdapter(Adapter):
    def command(self, sp: ServerPlan) -> list[str]:
        # ``python -m`` rather than the ``vllm`` script: the CPU wheel's dist name breaks the script's lookup.
        return [
            str(sp.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(sp.model),
            "--served-model-name",
            sp.served_model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(sp.port),
            *sp.args,
        ]

    def request_extra(self, prefix_cache: str = "off") -> dict[str, Any]:
        # vLLM has no per-request prefix-cache switch: its flag decides (checks.check_prefix_cache)
        return {"stream_options": {"continuous_usage_stats": True}}

    def version_command(self, sp: ServerPlan) -> list[str] | None:
        return [str(sp.python), "-c", "import vllm; print(vllm.__version__)"] if sp.python else None

    def python(self, sp: ServerPlan) -> str | None:
        return str(sp.python) if sp.python else None


class OpenAICompatibleAdapter(Adapter):
    """Any OpenAI-compatible server, attached: the plain OpenAI request (no engine-specific fields), no
    command (collector run never starts one)."""


ADAPTERS: dict[str, Adapter] = {
    "llamacpp": LlamaCppAdapter("llamacpp"),
    "vllm": VllmAdapter("vllm"),
    "openai": OpenAICompatibleAdapter("openai"),
}


def adapter_for(engine: str) -> Adapter:
    return ADAPTERS[engine]


def server_env(sp: ServerPlan) -> dict[str, str]:
    return {**os.environ, **sp.env}


class ServerProcess:
    """A started server (or, with ``attach``, a handle on one that runs elsewhere).

    ``start()`` must be called from the thread that stays alive for the server's whole life (the main thread
    of ``collector run``): the kernel's parent-death signal fires when the *thread* that forked the server
    ends.
    """

    def __init__(
        self,
        sp: ServerPlan,
        log_stream: Any | None,
        on_exit: Callable[[int], None],
        log_path: Path | None = None,
        on_log_error: Callable[[OSError], None] | None = None,
        run_path: Path | None = None,
    ):
        self.sp = sp
        self.adapter = adapter_for(sp.engine)
        self.command = None if sp.attach else self.adapter.command(sp)
        self._log_stream = log_stream
        self.log_path = log_path
        self._on_exit = on_exit
        self._on_log_error = on_log_error
        self._run_path = run_path
        self.proc: subprocess.Popen | None = None
        self.stopping = False
        self.exit_code: int | None = None
        self._threads: list[threading.Thread] = []
        self._tail = b""
        self._watchdog: subprocess.Popen | None = None
        self._record: Path | None = None

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
                preexec_fn=_die_with_parent(os.getpid()),
            )
        except OSError as err:
            raise RunError(f"{exe}: cannot start server: {err.strerror}") from err
        self._watchdog = _start_watchdog(self.proc.pid, self.sp.stop_timeout_s)
        self._record = write_server_record(self.sp.port, self.proc.pid, self.command, self._run_path)
        for target, name in ((self._pump_log, "server-log"), (self._watch, "server-watch")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def _pump_log(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None and self._log_stream is not None
        stream = self._log_stream  # a started server's log always has a stream (an attached one has no pump)
        fd = self.proc.stdout.fileno()
        failed = False
        while chunk := os.read(fd, _READ):
            self._tail = (self._tail + chunk)[-_TAIL_BYTES:]
            if failed:
                continue  # keep draining: a server blocked on a full pipe would hang the run
            try:
                stream.write(chunk)
            except OSError as err:  # disk full: the run ends as failed; the server must not block meanwhile
                failed = True
                if self._on_log_error is not None:
                    self._on_log_error(err)

    def _watch(self) -> None:
        assert self.proc is not None
        rc = self.proc.wait()
        self.exit_code = rc
        if not self.stopping:
            self._on_exit(rc)

    @property
    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    @property
    def last_log_line(self) -> str:
        """The last non-empty line (or tqdm ``\\r`` segment) the server printed; "" before it printed any."""
        for line in reversed(re.split(rb"[\r\n]", self._tail)):
            if line.strip():
                return line.decode("utf-8", "replace").strip()
        return ""

    def startup_failure(self, code: int) -> str:
        """One line for a server that exited during start-up: its code, the log's path and first error
        line."""
        for t in self._threads:
            if t.name == "server-log":
                t.join(timeout=2.0)  # the last lines of the log are written before it is read
        if self.log_path is None:
            return f"server exited with code {code} during start-up"
        return (
            f"server exited with code {code} during start-up; {self.log_path}: "
            f"{first_error_line(self.log_path)}"
        )

    def wait_healthy(
        self,
        timeout_s: float,
        abort: Callable[[], str | None] = lambda: None,
        on_poll: Callable[[float], None] | None = None,
    ) -> float:
        """Poll ``/health`` until it answers 200 from the process this run started; return seconds waited.
        The server dying, the timeout passing or another process answering on the port is a RunError naming
        what happened. ``on_poll(seconds waited)`` runs between polls (the start-up display)."""
        url = f"{self.sp.base_url}/health"
        t0 = time.monotonic()
        last = "no answer yet"
        with httpx.Client(timeout=5.0) as client:
            while True:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RunError(self.startup_failure(self.proc.returncode))
                if (why := abort()) is not None:
                    raise RunError(f"start-up aborted: {why}")
                # each poll within what is left of the start-up time: a /health that trickles its answer
                # must not stretch the wait past timeout_s
                left_s = timeout_s - (time.monotonic() - t0)
                try:
                    status, _ = bounded_http.get(client, url, deadline_s=min(5.0, max(0.5, left_s)))
                    if status == 200:
                        self.check_identity()
                        return time.monotonic() - t0
                    last = f"HTTP {status}"
                except httpx.ConnectError as err:
                    if self.proc is None:  # attached: nobody is starting a server that could still come up
                        raise RunError(f"{url}: connection refused — is the server running? ({err})") from err
                    last = type(err).__name__
                except httpx.HTTPError as err:
                    last = (
                        f"{type(err).__name__}: {err}"
                        if isinstance(err, bounded_http.BoundExceeded)
                        else type(err).__name__
                    )
                if time.monotonic() - t0 > timeout_s:
                    said = (
                        f"; the server's last line: {_clip(self.last_log_line, 200)}"
                        if self.last_log_line
                        else ""
                    )
                    raise RunError(f"{url}: not healthy after {timeout_s:.0f} s (last: {last}){said}")
                if on_poll is not None:
                    on_poll(time.monotonic() - t0)
                time.sleep(0.5)

    def check_identity(self) -> dict[str, Any]:
        """Who listens on the port: the facts, or RunError when it is not the server this run started.

        A started server: a listener must be in its process group (vLLM's API server is the group leader; a
        worker it forked shares the group). Nothing found in /proc (not Linux, or hidden pids) leaves it
        undecided (``ours`` None) rather than failing."""
        if self.proc is None:
            return {"ours": None, "why": "attached server: not started by this run"}
        owners = port_owner_pids(self.sp.port)
        facts: dict[str, Any] = {"pid": self.proc.pid, "listener_pids": owners, "ours": None}
        if not owners:
            # /proc cannot tell (not Linux, hidden pids): at least the model it serves must be ours
            facts["why"] = f"no listener on port {self.sp.port} found in /proc"
            served = served_model_ids(self.sp.base_url)
            facts["served_models"] = served
            if served is not None and self.sp.served_model_name not in served:
                raise RunError(
                    f"port {self.sp.port} answers as {served}, not as {self.sp.served_model_name!r}: not the "
                    "server this run started; stop it, or choose another [server].port"
                )
            return facts
        ours = [p for p in owners if _pgid(p) == self.proc.pid]
        if not ours:
            who = describe_pid(owners[0])
            raise RunError(
                f"port {self.sp.port} answers, but from {who}, not from the server this run started "
                f"(pid {self.proc.pid}): an earlier server still holds the port; stop it, or choose another "
                "[server].port"
            )
        facts["ours"] = True
        return facts

    def stop(self, hurry: Callable[[], bool] = lambda: False) -> int | None:
        """SIGTERM the server's process group, SIGKILL whatever is left after ``stop_timeout_s`` — or as soon
        as ``hurry()`` says so (a second Ctrl-C)."""
        self.stopping = True
        if self.proc is None:
            return None
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        if self.proc.poll() is None:
            _killpg(pgid, signal.SIGTERM)
            deadline = time.monotonic() + self.sp.stop_timeout_s
            while self.proc.poll() is None and time.monotonic() < deadline and not hurry():
                time.sleep(0.05)
            if self.proc.poll() is None:
                _killpg(pgid, signal.SIGKILL)
                self.proc.wait()
        # children (vLLM's engine core) may outlive the leader: the group goes too
        deadline = time.monotonic() + self.sp.stop_timeout_s
        while _group_alive(pgid) and time.monotonic() < deadline and not hurry():
            _killpg(pgid, signal.SIGTERM)
            time.sleep(0.2)
        if _group_alive(pgid):
            _killpg(pgid, signal.SIGKILL)
        for t in self._threads:
            t.join(timeout=10)
        self._release_watchdog()
        if self._record is not None:
            with contextlib.suppress(OSError):
                self._record.unlink()
        return self.proc.returncode

    def _release_watchdog(self) -> None:
        wd, self._watchdog = self._watchdog, None
        if wd is None or wd.stdin is None:
            return
        try:
            wd.stdin.write(b"x")  # released: the server was stopped on purpose
            wd.stdin.close()
            wd.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            wd.kill()


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


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM a process group, SIGKILL it if anything is left after ``grace_s``."""
    _killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        _killpg(pgid, signal.SIGKILL)


# -- the server dies with the collector ---------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """The server's pre-exec hook: ask the kernel for SIGTERM when the collector dies (Linux ``prctl``).

    Resolved before the fork, so the child only makes the call. If the collector died between fork and
    prctl, the child is already an orphan: it exits instead of exec'ing a server nobody will stop."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return hook


# Runs as ``python -c``: waits on its stdin, the read end of a pipe only the collector holds. One byte means
# "released" (the server was stopped on purpose); end-of-file without it means the collector died: the
# server's
# whole process group is stopped, grandchildren included (which the parent-death signal does not reach).
_WATCHDOG = """
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
if sys.stdin.buffer.read(1):
    sys.exit(0)
def alive():
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False
if alive():
    os.killpg(pgid, signal.SIGTERM)
    end = time.monotonic() + grace
    while alive() and time.monotonic() < end:
        time.sleep(0.1)
    if alive():
        os.killpg(pgid, signal.SIGKILL)
"""


def _start_watchdog(pgid: int, grace_s: float) -> subprocess.Popen | None:
    try:
        return subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(pgid), str(grace_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C in the terminal must not reach it
        )
    except OSError:  # pragma: no cover - the interpreter we run in cannot start: the other guards remain
        return None


# -- the record of a running server (outside raw/) ---------------------------------------------------------


def state_dir() -> Path:
    """Where running servers are recorded: ``$ANATOMY_STATE_DIR``, ``$XDG_RUNTIME_DIR/inference-anatomy`` or
    ``/tmp/inference-anatomy-<uid>`` — places that do not outlive a reboot, as pids do not."""
    if os.environ.get("ANATOMY_STATE_DIR"):
        return Path(os.environ["ANATOMY_STATE_DIR"])
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "inference-anatomy"
    return Path(f"/tmp/inference-anatomy-{os.getuid()}")


def _record_path(port: int) -> Path:
    return state_dir() / f"server-{port}.json"


def proc_start_ticks(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (``/proc/<pid>/stat`` field 22): with the pid, it
    names one process; a reused pid has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def write_server_record(port: int, pid: int, argv: list[str], run_path: Path | None) -> Path | None:
    """Record a started server; best effort (no record only weakens the next start's orphan check)."""
    rec = {
        "pid": pid,
        "pgid": pid,
        "start_ticks": proc_start_ticks(pid),
        "collector_pid": os.getpid(),
        "collector_start_ticks": proc_start_ticks(os.getpid()),
        "port": port,
        "argv": argv,
        "run": str(run_path) if run_path else None,
        "started_unix": time.time(),
    }
    path = _record_path(port)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(rec) + "\n")
        tmp.replace(path)
    except OSError:
        return None
    return path


def _same_process(pid: int | None, ticks: int | None) -> bool:
    return isinstance(pid, int) and ticks is not None and proc_start_ticks(pid) == ticks


def stop_recorded_orphan(port: int, grace_s: float = 10.0) -> str | None:
    """Stop the server an earlier, dead collector left on ``port``; a line saying what was done, or None.

    Only a process that is exactly the recorded one (pid and start time) is touched, and only when the
    collector that started it is gone (a live one is another run in progress: its port is simply busy)."""
    path = _record_path(port)
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):
        return None
    if not _same_process(rec.get("pid"), rec.get("start_ticks")):
        with contextlib.suppress(OSError):
            path.unlink()  # stale: that server is gone
        return None
    if _same_process(rec.get("collector_pid"), rec.get("collector_start_ticks")):
        return None
    stop_group(int(rec["pgid"]), grace_s)
    with contextlib.suppress(OSError):
        path.unlink()
    return (
        f"stopped server pid {rec['pid']} left running on port {port} by an earlier collector "
        f"(pid {rec.get('collector_pid')}, run {rec.get('run')})"
    )


# -- who holds a port (/proc) ------------------------------------------------------------------------------


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could bind ``host:port`` now (SO_REUSEADDR, as servers set it: TIME_WAIT is free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _listen_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # local_address is HEXIP:HEXPORT; state 0A is LISTEN; field 9 is the socket's inode
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


def port_owner_pids(port: int) -> list[int]:
    """Pids holding a listening socket on ``port`` (from /proc; [] when nothing is found or /proc is
    absent)."""
    inodes = _listen_inodes(port)
    if not inodes:
        return []
    targets = {f"socket:[{i}]" for i in inodes}
    pids: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    pids.append(int(proc.name))
                    break
            except OSError:
                continue
    return sorted(pids)


def describe_pid(pid: int) -> str:
    """``pid 123 (llama-server -m model.gguf --port 8392 …)``, the command clipped to one short line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        cmd = " ".join(a.decode("utf-8", "replace") for a in argv)
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({cmd[:120] + ('…' if len(cmd) > 120 else '')})"


def served_model_ids(base_url: str) -> list[str] | None:
    """The model ids ``/v1/models`` lists (llama-server: its --alias; vLLM: --served-model-name); None when it
    gives no such list."""
    try:
        with httpx.Client() as client:
            _, text = bounded_http.get(client, f"{base_url}/v1/models")
        data = json.loads(text).get("data")
    except (httpx.HTTPError, ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(data, list):
        return None
    return [str(d.get("id")) for d in data if isinstance(d, dict)]


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


# -- a failed start-up, in one line -------------------------------------------------------------------------

# A Python exception line (vLLM), prefixed or not by "(APIServer pid=N)"; then words engines use for errors.
_EXC_LINE = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt): \S")
_ERR_WORDS = re.compile(
    r"(?i)\b(?:error|couldn't|could not|cannot|can't|failed|fatal|invalid|unknown|unrecognized|no such|"
    r"not found|out of memory)\b"
)


def first_error_line(log_path: Path, limit: int = 200) -> str:
    """The line of a server log that best says why the server stopped: the first Python exception line,
    else the first line with an error word, else the last line; read line by line, clipped to ``limit``."""
    first_err = last = None
    try:
        with open(log_path, "rb") as f:
            for raw in f:
                for seg in raw.split(b"\r"):
                    line = seg.decode("utf-8", "replace").strip()
                    if not line:
                        continue
                    last = line
                    if _EXC_LINE.match(line):
                        return _clip(line, limit)
                    if first_err is None and _ERR_WORDS.search(line):
                        first_err = line
    except OSError as err:
        return f"cannot read it ({err.strerror})"
    why = first_err or last
    return _clip(why, limit) if why else "the log is empty"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
