"""The load client's event loop (``[load] loop``): asyncio's own, or uvloop (libuv under asyncio's interface,
``pip install inference-anatomy[uvloop]``).

Why a choice at all: every chunk of every stream wakes the loop. Measured on one quiet core (methodology
page), uvloop spends 5–15 % less CPU per token, but the last chunk of a burst of 64+ streams is read 3–10x
later (per-chunk lag p99 39 vs 5 ms at 64 streams): per-chunk timing is what this client is for, so asyncio's
loop is the default. The run records the loop that ran (``client_stack`` event).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory asyncio.Runner takes for a ``[load] loop`` setting (None: asyncio's own loop); "uvloop"
    where it is not installed (Windows) falls back to asyncio's loop, and the run's ``client_stack`` event
    says which ran."""
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            return None
        return uvloop.new_event_loop
    return None


def run_on(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on the loop ``loop`` names (``loop_factory``)."""
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        return runner.run(coro)


def client_stack(transport: str) -> dict[str, str]:
    """What the running load client is made of, for the run's ``client_stack`` event: the loop actually
    running (not the one asked for) and the transport's package, with versions."""
    running = asyncio.get_running_loop()
    if type(running).__module__.startswith("uvloop"):
        loop = f"uvloop {importlib.metadata.version('uvloop')}"
    else:
        loop = f"asyncio ({type(running).__name__})"
    return {  # the [load] transport names are the packages' names
        "loop": loop,
        "transport": f"{transport} {importlib.metadata.version(transport)}",
        "httpx": importlib.metadata.version("httpx"),
    }
