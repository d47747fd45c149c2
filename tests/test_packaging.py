"""A plain ``pip install .`` (not editable) carries everything the tools read besides code (issue #12: it used
to end in TemplateNotFound): the report's templates, hand-written pages and assets (site/, shipped as the
package ``analysis.report.sitefiles``) and the bundled model configs. The installed copy analyses the
committed CPU campaign and renders its pages from a folder that is not the checkout."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import setuptools

REPO = Path(__file__).resolve().parent.parent
CAMPAIGN = "cpu-tiny-qwen2"


def test_the_package_list_is_every_package_on_disk():
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    on_disk = setuptools.find_packages(str(REPO), include=["collector*", "analysis*"])
    assert sorted(listed) == sorted([*on_disk, "analysis.report.sitefiles"])


def test_a_plain_install_renders_the_report(tmp_path):
    target = tmp_path / "site-packages"
    p = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    shipped = target / "analysis" / "report" / "sitefiles"
    for folder, pattern in (("templates", "**/*.j2"), ("docs", "*.md"), ("assets", "*")):
        want = sorted(f.relative_to(REPO / "site").as_posix() for f in (REPO / "site" / folder).glob(pattern))
        got = sorted(f.relative_to(shipped).as_posix() for f in (shipped / folder).glob(pattern))
        assert want and got == want, folder
    models = sorted(f.name for f in (REPO / "analysis" / "models").glob("*.json"))
    assert sorted(f.name for f in (target / "analysis" / "models").glob("*.json")) == models
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    work = tmp_path / "elsewhere"  # not the checkout: nothing may be found relative to it
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=work, env=env, capture_output=True, text=True, timeout=900
        )

    where = run("-c", "import analysis.report.render as r; print(r.TEMPLATES_DIR)")
    assert where.stdout.strip() == str(shipped / "templates"), where.stderr
    a = run("-m", "collector.cli", "analyze", "--raw", str(REPO / "raw"), "--out", "results", CAMPAIGN)
    assert a.returncode == 0, a.stderr
    r = run("-m", "analysis.report.render", "--results", "results", "--out", "docs", "--quiet", CAMPAIGN)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert (work / "docs" / "index.md").is_file() and (work / "docs" / "methodology.md").is_file()
    assert any((work / "docs").rglob(f"*{CAMPAIGN}*"))
