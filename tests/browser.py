"""Helpers for the site tests: build the site once per test session, serve it, drive Chromium.

The site is built from every campaign there is: the reference campaign (imported from ../shared when present),
the repository's own ``raw/`` (the CPU smoke campaign, later the H200 campaign), and a synthetic H200-like
llama.cpp campaign (two weight formats, exact timings: ``tests/synthetic_gpu.py`` writes it with the raw
store) so that the cross-campaign comparison page is rendered and tested before real H200 data exists.

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
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from analysis.report.build import build_site
from tests.synthetic_gpu import write_campaign

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
    for base in (
        os.environ.get("ANATOMY_SEED_RUNS"),
        os.environ.get("SEED_RUNS"),
        ROOT.parent / "shared" / "seed-runs",
    ):
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


REPO_RAW = ROOT / "raw"


@dataclass(frozen=True)
class BuiltSite:
    root: Path  # the work folder
    raw: Path
    results: Path
    docs: Path
    site: Path
    build_s: float
    campaigns: tuple[str, ...]  # every campaign with results
    synthetic: str  # the synthetic GPU campaign's name


def synthetic_gpu_campaign(raw: Path) -> str:
    """Write the synthetic H200-like campaign (tests/synthetic_gpu.py) into ``raw``; return its name."""
    return write_campaign(raw)


def repo_has_campaigns() -> bool:
    """raw/ holds campaigns (``ANATOMY_SITE_TEST_REPO_RAW=0`` leaves them out, e.g. while one is being
    re-run)."""
    if os.environ.get("ANATOMY_SITE_TEST_REPO_RAW", "1") == "0":
        return False
    return REPO_RAW.is_dir() and any(p.is_dir() for p in REPO_RAW.iterdir())


@functools.cache
def built_site() -> BuiltSite:
    """Import the reference campaign into a fresh raw store, add the synthetic GPU campaign, analyze it with
    the repository's raw/, render and build (strict), once."""
    work = Path(tempfile.mkdtemp(prefix="ia-site-"))
    raw, results, docs, site = work / "raw", work / "results", work / "docs", work / "public"
    raw.mkdir()
    src = reference_source()
    synthetic = synthetic_gpu_campaign(raw)
    roots = [raw, *([REPO_RAW] if repo_has_campaigns() else [])]
    t = time.perf_counter()
    build_site(roots, results, docs, site, imports=[(src, REFERENCE_CAMPAIGN)] if src else [])
    campaigns = tuple(sorted(p.parent.name for p in results.glob("*/findings.json")))
    return BuiltSite(work, raw, results, docs, site, time.perf_counter() - t, campaigns, synthetic)


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
