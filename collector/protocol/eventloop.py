"""The load client's event loop: uvloop where it is installed, else asyncio's own (``[load] loop``).

Why a choice at all: every chunk of every stream wakes the loop, so at 64+ streams on one core the loop's own
cost per wake-up is a large share of the client's CPU and of how late a chunk is read. uvloop (libuv under
asyncio's interface) is what vllm bench serve and AIPerf run on; the methodology page's table measures both
loops on the same core. The run records which one it used (``client_stack`` event).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory(loop: str) -> tuple[Callable[[], asyncio.AbstractEventLoop] | None, str]:
    """(the factory asyncio.Runner takes — None: asyncio's default —, the loop's name and version) for a
    ``[load] loop`` setting: "auto" is uvloop when it can be imported (Linux, macOS), else asyncio; "uvloop"
    without it installed falls back the same way (the run records what it used, never a silent guess)."""
    if loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop, f"uvloop {importlib.metadata.version('uvloop')}"
    return None, "asyncio"


def run_on(loop: str, coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)`` on the loop ``loop`` names (``loop_factory``)."""
    factory, _ = loop_factory(loop)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def client_stack(transport: str) -> dict[str, str]:
    """What the running load client is made of, for the run's ``client_stack`` event: the loop actually
    running (not the one asked for) and the transport's package, with versions."""
    running = asyncio.get_running_loop()
    if type(running).__module__.startswith("uvloop"):
        loop = f"uvloop {importlib.metadata.version('uvloop')}"
    else:
        loop = f"asyncio ({type(running).__name__})"
    package = "aiohttp" if transport == "aiohttp" else "httpcore"
    return {
        "loop": loop,
        "transport": f"{package} {importlib.metadata.version(package)}",
        "httpx": importlib.metadata.version("httpx"),
    }
