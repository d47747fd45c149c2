"""The site build end to end, as one function: import → analyze → render → ``mkdocs build --strict``.

``nox -s site`` runs the same steps through the command line; this module exists so the browser test and the
benchmark build the very same site into a temporary folder without touching the working tree's ``build/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from analysis.pipeline import analyze as analyze_fn
from analysis.report.render import REPO_ROOT, render_site
from collector.importer import import_results

MKDOCS_YML = REPO_ROOT / "mkdocs.yml"


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
