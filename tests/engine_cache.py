"""Where the tests find the real engines (`nox -s engines` builds them), and what happens when they are
missing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collector.engines import EnginePaths, engine_paths

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("ENGINES_CACHE", REPO / ".engines"))


def paths() -> EnginePaths:
    return engine_paths(CACHE)


def require(*artifacts: Path) -> None:
    """Skip when an engine artifact is missing; in CI (env CI set) that is a failure, never a silent skip."""
    missing = [p for p in artifacts if not p.exists()]
    if not missing:
        return
    msg = (
        f"engine cache incomplete ({missing[0]} missing): run `python -m collector.engines prepare "
        "--cache .engines`"
    )
    if os.environ.get("CI"):
        pytest.fail(msg)
    pytest.skip(msg)
