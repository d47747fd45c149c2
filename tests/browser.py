"""Helpers for the site tests: build the reference site once per test session, serve it, drive Chromium.

Chromium is Debian's package (``apt-get install chromium``), driven through Playwright's Python package with
``executable_path`` — Playwright never downloads a browser of its own here. The site is served by the
stdlib's ``http.server`` on 127.0.0.1; every request that leaves 127.0.0.1 is blocked and counted, which is
how the tests prove the pages need no network.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_CAMPAIGN = "rtx4090-qwen2.5-7b"
ARTIFACTS = ROOT / "build" / "test-artifacts"
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def reference_source() -> Path | None:
    """The reference campaign beside the checkout (``../shared/seed-runs``), or where SEED_RUNS points."""
    for base in (os.environ.get("SEED_RUNS"), ROOT.parent / "shared" / "seed-runs", Path("/work/shared/seed-runs")):
        if base and (Path(base) / REFERENCE_CAMPAIGN).is_dir():
            return Path(base) / REFERENCE_CAMPAIGN
    return None


def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env and Path(env).exists():
        return env
    for c in CHROMIUM_CANDIDATES:
        if Path(c).exists():
            return c
    return shutil.which("chromium")


@dataclass(frozen=True)
class BuiltSite:
    root: Path  # the work folder
    raw: Path
    results: Path
    docs: Path
    site: Path
    build_s: float


@functools.cache
def built_site() -> BuiltSite:
    """Import the reference campaign into a fresh raw store, analyze, render and build (strict), once."""
    import time

    from analysis.report.build import build_site

    src = reference_source()
    if src is None:
        raise FileNotFoundError("reference campaign not found (../shared/seed-runs/rtx4090-qwen2.5-7b)")
    work = Path(tempfile.mkdtemp(prefix="ia-site-"))
    raw, results, docs, site = work / "raw", work / "results", work / "docs", work / "public"
    t = time.perf_counter()
    build_site([raw], results, docs, site, imports=[(src, REFERENCE_CAMPAIGN)])
    return BuiltSite(work, raw, results, docs, site, time.perf_counter() - t)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) for the duration of the block; yield the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def html_pages(site: Path) -> list[str]:
    """Every page of the built site as a URL path (``campaigns/x/kv/``), 404 page excluded."""
    out = []
    for p in sorted(site.rglob("index.html")):
        rel = p.parent.relative_to(site).as_posix()
        out.append("" if rel == "." else rel + "/")
    return out
