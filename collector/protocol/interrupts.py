"""SIGINT, SIGTERM and SIGHUP during ``collector run``: one handler for the whole run, so a signal is always
honoured and never reaches the user as a traceback.

- Before the event loop (start-up, server loading) the first signal raises ``Interrupted`` in the main
  thread: the run unwinds, the server is stopped and the run sealed as interrupted.
- While the load runs, ``on_signal`` (set by the protocol) turns it into the run's abort on the event loop:
  requests in flight are recorded as aborted, finished ones are already on disk.
- Only the first signal raises. Later ones (a second Ctrl-C while the server is being stopped) set
  ``hurry``: the stop goes straight to SIGKILL instead of waiting, and the seal is still written. Raising
  again there would escape the clean-up as a bare KeyboardInterrupt (exit −2, run unsealed): the race a
  loaded box showed with Ctrl-C during llama-server's loading.
- SIGHUP (the ssh session dropped) stops and seals like SIGTERM, and silences the terminal output: writes to
  a terminal that went away fail, and nothing more can be read there anyway. A SIGHUP ignored when the run
  began (``nohup``) stays ignored: the run carries on to its end.

Python's own SIGINT handling (``KeyboardInterrupt``) and asyncio's (which cancels the main task) are both
replaced while the handler is installed: asyncio installs its own only over Python's default.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """The run was interrupted by a signal before its load began (a BaseException, as KeyboardInterrupt is:
    no ``except Exception`` on the way may swallow it)."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class Interrupts:
    """Install with ``install()`` (main thread only; elsewhere a no-op), put back with ``restore()``."""

    def __init__(self, on_hangup: Callable[[], None] | None = None):
        self.received: list[str] = []  # signal names, in order
        self.on_signal: Callable[[str], None] | None = None
        self.hurry = False  # a second signal: stop the server at once
        self._on_hangup = on_hangup
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            if sig == signal.SIGHUP and signal.getsignal(sig) == signal.SIG_IGN:
                continue  # started under nohup: carry on to the end
            self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if signum == signal.SIGHUP and self._on_hangup is not None:
            self._on_hangup()
        if len(self.received) > 1:
            self.hurry = True
            return
        if self.on_signal is not None:
            self.on_signal(name)
            return
        raise Interrupted(name)
