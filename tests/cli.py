"""``collector`` as a user runs it: the command line in a child process (a plain helper module, not a test
module), so a test sees the exit status and the one-line error a user would see."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collector_cli(
    *args: str | Path, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m collector.cli ARGS`` from the repository root (in ``env`` when given); stdout and stderr
    captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
