"""inference-anatomy's collector: observe a real inference server and write raw/ (append-only)."""

__version__ = "0.1.0"
