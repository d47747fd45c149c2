"""The site build end to end, as one function: import → analyze → render → ``mkdocs build --strict``.

``nox -s site`` runs the same steps through the command line; this module exists so the browser test and the
benchmark build the very same site into a temporary folder without touching the working tree's ``build/``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analysis.pipeline.cache import OUT_DIR, FolderCache, versions_text
from analysis.report.paths import REPO_ROOT, SITE_DIR
from collector.raw.errors import AnatomyError
from collector.raw.store import sha256_file

MKDOCS_YML = REPO_ROOT / "mkdocs.yml"
# the same file shipped in a wheel: site/mkdocs.yml is a link to it, copied as package data
SHIPPED_MKDOCS_YML = SITE_DIR / "mkdocs.yml"


class ReportError(AnatomyError):
    """`collector report` cannot build the site (one line: what is missing and how to get it)."""


@dataclass
class BuildTimes:
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def total_s(self) -> float:
        return sum(self.steps.values())


def mkdocs_build(docs_dir: Path, site_dir: Path, config_file: Path = MKDOCS_YML, strict: bool = True) -> None:
    """``mkdocs build --strict`` with docs_dir/site_dir overridden (a warning fails the build when strict)."""
    import contextlib

    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    # mkdocs.yml names files relative to the repository root (hooks, the jieba user dictionary).
    with contextlib.chdir(Path(config_file).resolve().parent):
        cfg = load_config(str(config_file), docs_dir=str(docs_dir), site_dir=str(site_dir), strict=strict)
        cfg.plugins.on_startup(command="build", dirty=False)
        try:
            build(cfg)
        finally:
            cfg.plugins.on_shutdown()


# What besides the docs folder and the config decides the built site: these libraries' versions (the theme's
# templates, the Markdown extensions, the search index's word segmentation) and the build date (sitemap.xml
# and its gzip header carry it).
MKDOCS_DISTRIBUTIONS = ("mkdocs", "mkdocs-material", "Markdown", "pymdown-extensions", "jieba")
SITE_ENTRY = "site"  # the one name the site cache keeps entries under


def site_key(docs_dir: Path, config_file: Path) -> str:
    """sha256 over everything ``mkdocs build`` reads: every file of ``docs_dir`` (the dot files the hooks
    read too), the config, the hooks and the jieba dictionary of site/, the versions of
    MKDOCS_DISTRIBUTIONS, the Python version and the build date."""
    import hashlib

    from mkdocs.utils import get_build_date

    h = hashlib.sha256()
    extra = [Path(config_file), *sorted((SITE_DIR / "hooks").glob("*.py")), SITE_DIR / "jieba_user_dict.txt"]
    for p in [*sorted(q for q in Path(docs_dir).rglob("*") if q.is_file()), *extra]:
        rel = p.relative_to(docs_dir).as_posix() if p.is_relative_to(docs_dir) else f"@{p.name}"
        h.update(f"{rel}\0{sha256_file(p) if p.is_file() else '-'}\n".encode())
    h.update(f"{versions_text(MKDOCS_DISTRIBUTIONS)}date {get_build_date()}\n".encode())
    return h.hexdigest()


def mkdocs_build_cached(docs_dir: Path, site_dir: Path, cache: Path, config_file: Path = MKDOCS_YML) -> str:
    """``mkdocs_build``, unless ``cache`` holds the site built from the very same inputs (site_key): then a
    copy of it. One line: which, and why an entry found could not be used."""
    store = FolderCache(cache)
    key = site_key(docs_dir, config_file)
    problem = store.problem(SITE_ENTRY, key)
    if problem is None:
        shutil.rmtree(site_dir, ignore_errors=True)  # as mkdocs: no file of an earlier build lingers
        shutil.copytree(store.entry(SITE_ENTRY, key) / OUT_DIR, site_dir)
        return f"site: docs and config unchanged: {site_dir} copied from the cache ({key[:12]})"
    mkdocs_build(docs_dir, site_dir, config_file)
    store.store(SITE_ENTRY, key, site_dir)
    why = f" (cache entry not used: {problem})" if problem else ""
    return f"site: built {site_dir} with mkdocs{why}"


def standalone_config(work_dir: Path, docs_dir: Path, site_dir: Path) -> Path:
    """The project's MkDocs config (the checkout's mkdocs.yml, else the copy a wheel ships) written into
    ``work_dir`` with every path it names made absolute — docs and site folders, the navigation hook, the
    jieba dictionary — so the site builds from any folder, the checkout or an installed package alike."""
    import yaml  # local import: a dependency of mkdocs, needed only here

    src = MKDOCS_YML if MKDOCS_YML.is_file() else SHIPPED_MKDOCS_YML
    cfg = yaml.safe_load(src.read_text(encoding="utf-8"))
    cfg.update(docs_dir=str(docs_dir.resolve()), site_dir=str(site_dir.resolve()))
    cfg.pop("watch", None)
    cfg["hooks"] = [str((SITE_DIR / "hooks" / Path(h).name).resolve()) for h in cfg.get("hooks") or []]
    for plugin in cfg.get("plugins") or []:
        if isinstance(plugin, dict) and isinstance(plugin.get("search"), dict):
            if "jieba_dict_user" in plugin["search"]:
                plugin["search"]["jieba_dict_user"] = str((SITE_DIR / "jieba_user_dict.txt").resolve())
    out = work_dir / "mkdocs.yml"
    out.write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return out


def report_site(
    raw_roots: list[Path],
    out_site: Path,
    work_dir: Path,
    campaigns: list[str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> BuildTimes:
    """``collector report``: analyze only ``campaigns`` (default: every one in ``raw_roots``), render their
    pages and build the static site into ``out_site``, every intermediate file under ``work_dir``."""
    try:
        import jinja2  # noqa: F401  # local import: the site extra, checked before any work
        import material  # noqa: F401  # local import: same
        import mkdocs  # noqa: F401  # local import: same
        import vl_convert  # noqa: F401  # local import: same
    except ImportError as err:
        raise ReportError(
            f"collector report needs the site extra ({err.name} is missing): "
            "pip install 'inference-anatomy[site]'"
        ) from None
    from analysis.pipeline.analyze import analyze as analyze_fn  # local import: heavy (pandas, altair)
    from analysis.report.render import render_site  # local import: heavy (the pages' modules, jinja2)

    say = on_line or (lambda _line: None)
    times = BuildTimes()
    out_site, work_dir = Path(out_site).resolve(), Path(work_dir).resolve()  # mkdocs runs from work_dir
    results, docs = work_dir / "results", work_dir / "docs"
    t = time.perf_counter()
    for line in analyze_fn([Path(r) for r in raw_roots], results, campaigns):
        say(line)
    times.steps["analyze"] = time.perf_counter() - t
    t = time.perf_counter()
    report = render_site(results, docs, campaigns=campaigns, standalone=True)
    for line in report.lines()[-1:]:
        say(line)
    times.steps["render"] = time.perf_counter() - t
    t = time.perf_counter()
    mkdocs_build(docs, out_site, config_file=standalone_config(work_dir, docs, out_site))
    times.steps["mkdocs"] = time.perf_counter() - t
    say(f"site: {out_site} ({times.total_s:.0f} s); view it with: python -m http.server -d {out_site}")
    return times


def build_site(
    raw_roots: list[Path],
    results_dir: Path,
    docs_dir: Path,
    site_dir: Path,
    imports: Sequence[tuple[Path, str]] = (),
    analyze: bool = True,
    on_line: Callable[[str], None] | None = None,
) -> BuildTimes:
    """Import ``(source folder, campaign)`` pairs into the first raw root, analyze, render, build."""
    from analysis.pipeline.analyze import analyze as analyze_fn  # local import: heavy (pandas, altair)
    from analysis.report.render import render_site  # local import: heavy (the pages' modules, jinja2)
    from collector.protocol.importer import import_results  # local import: the peers' parsers

    times = BuildTimes()
    say = on_line or (lambda _line: None)
    t = time.perf_counter()
    if imports:
        for src, campaign in imports:
            for line in import_results(Path(src), campaign=campaign, raw_root=Path(raw_roots[0])):
                say(line)
    times.steps["import"] = time.perf_counter() - t
    if analyze:
        t = time.perf_counter()
        for line in analyze_fn([Path(r) for r in raw_roots], Path(results_dir), None):
            say(line)
        times.steps["analyze"] = time.perf_counter() - t
    t = time.perf_counter()
    report = render_site(results_dir, docs_dir)
    for line in report.lines()[-1:]:
        say(line)
    times.steps["render"] = time.perf_counter() - t
    t = time.perf_counter()
    mkdocs_build(docs_dir, site_dir)
    times.steps["mkdocs"] = time.perf_counter() - t
    return times


def main(argv: list[str] | None = None) -> int:
    """``python -m analysis.report.build``: ``mkdocs build --strict`` of the rendered pages (mkdocs.yml's
    docs_dir), reusing the site a cache holds when nothing it is built from changed."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--docs", type=Path, default=REPO_ROOT / "build" / "site" / "docs")
    ap.add_argument("--site-dir", type=Path, default=REPO_ROOT / "public")
    ap.add_argument("--config", type=Path, default=MKDOCS_YML, help="the MkDocs config (mkdocs.yml)")
    ap.add_argument("--cache", type=Path, required=True, help="where built sites are kept (build/cache/site)")
    args = ap.parse_args(argv)
    import logging

    from mkdocs.exceptions import MkDocsException  # local import: the site extra, only here

    said = (
        logging.StreamHandler()
    )  # mkdocs' warnings (strict: each one fails the build), as its CLI shows them
    said.setFormatter(logging.Formatter("%(levelname)s - %(message)s"))
    logging.getLogger("mkdocs").addHandler(said)
    logging.getLogger("mkdocs").setLevel(logging.WARNING)
    try:
        print(mkdocs_build_cached(args.docs.resolve(), args.site_dir.resolve(), args.cache, args.config))
    except (AnatomyError, MkDocsException) as err:
        print(f"build: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    except OSError as err:  # the cache or the site folder could not be written (disk full, permissions)
        print(f"build: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
