"""The one error tree of the project; the CLI prints ``str(err)`` (one line) and exits 1."""

from __future__ import annotations

from pathlib import Path


class AnatomyError(Exception):
    """Root of every error the project raises on purpose: the CLI turns it into a one-line message."""


class StoreError(AnatomyError):
    """The raw store refused an operation (overwrite, bad name, sealed run, ...)."""


class ImportSourceError(AnatomyError):
    """A results folder to import is missing or not what it claims to be."""


class PlanError(AnatomyError):
    """A plan file or a `collector plan` argument is invalid; the message names the file/field."""


class RunError(AnatomyError):
    """`collector run` could not run or finish its protocol."""


class ParseError(AnatomyError, ValueError):
    """A raw file did not have the shape its parser expects: ``file:line: what``. Never a silent guess.

    Also a ValueError, so code that validates values with ``except ValueError`` sees bad files too.
    """

    def __init__(self, path: str | Path, line: int | None, what: str):
        self.path = str(path)
        self.line = line
        self.what = what
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {what}")
