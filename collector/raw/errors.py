"""The exception tree a user sees as one-line messages (the CLI prints ``str(err)`` and exits 1)."""


class AnatomyError(Exception):
    """Base of every error the CLI turns into a one-line message."""


class StoreError(AnatomyError):
    """The raw store refused an operation (overwrite, bad name, sealed run, ...)."""


class ImportSourceError(AnatomyError):
    """A results folder to import is missing or not what it claims to be."""


class PlanError(AnatomyError):
    """A plan file or a `collector plan` argument is invalid; the message names the file/field."""


class RunError(AnatomyError):
    """`collector run` could not run or finish its protocol."""
