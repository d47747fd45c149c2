"""The one error every parser raises: ``file:line: what was expected``."""

from __future__ import annotations

from pathlib import Path


class ParseError(ValueError):
    """A raw file did not have the shape its parser expects. Never a silent guess."""

    def __init__(self, path: str | Path, line: int | None, what: str):
        self.path = str(path)
        self.line = line
        self.what = what
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {what}")
