"""A plain ``pip install .`` (not editable) carries everything the tools read besides code (issue #12: it used
to end in TemplateNotFound): the report's templates, hand-written pages and assets (site/, shipped as the
package ``analysis.report.sitefiles``) and the bundled model configs. The installed copy analyses the
committed CPU campaign and renders its pages from a folder that is not the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
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
    models = sorted(f.name for f in (REPO / "analysis" / "core" / "models").glob("*.json"))
    shipped_models = sorted(f.name for f in (target / "analysis" / "core" / "models").glob("*.json"))
    assert models and shipped_models == models
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


def _venv_with_wheel(tmp_path: Path) -> Path:
    """A fresh venv holding the built wheel; the dependencies come from this interpreter's site-packages
    (a .pth line after the venv's own, so nothing is downloaded and the wheel's copy is the one imported)."""
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # never the checkout

    def pip(*args: str) -> None:
        p = subprocess.run([sys.executable, "-m", "pip", *args], env=clean, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr

    wheels = tmp_path / "wheels"
    pip("wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO))
    (wheel,) = wheels.glob("inference_anatomy-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = venv.glob("lib/python*/site-packages")
    (site / "zz-parent-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip("--python", str(venv / "bin" / "python"), "install", "-q", "--no-deps", str(wheel))
    return venv


def test_a_wheel_reports_from_anywhere(tmp_path):
    """`collector report` from an installed wheel, in a folder that is not the checkout, on a raw root made
    there from files a peer tool wrote: the site is built (MkDocs config, nav hook, templates shipped), holds
    only that campaign, titled by its own name; `collector exclude` leaves a run out without touching it."""
    venv = _venv_with_wheel(tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    shutil.copytree(REPO / "tests" / "data" / "peers" / "guidellm-0.8.1", work / "results" / "gl")
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=work, env=env, capture_output=True, text=True, timeout=600)

    where = run("python", "-c", "import collector; print(collector.__file__)")
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    i = run("collector", "import", "results", "--campaign", "my-bench", "--engine", "vllm", "--raw", "raw")
    assert i.returncode == 0, i.stderr
    r = run("collector", "report", "--raw", "raw", "--out", "site")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    index = (work / "site" / "index.html").read_text(encoding="utf-8")
    assert "my-bench" in index and "参考批次在本次构建中不可用" not in index  # no banner of our own site
    assert sorted(p.name for p in (work / "site" / "campaigns").iterdir()) == ["my-bench"]
    assert not any(venv.rglob("build/site"))  # nothing rendered into site-packages
    run_dir = work / "raw" / "my-bench" / "gl"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run_dir.iterdir())
    e = run("collector", "exclude", "raw/my-bench/gl", "--reason", "client on a loaded box")
    assert e.returncode == 0, e.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run_dir.iterdir()) == before
    assert run("collector", "verify", "--raw", "raw").returncode == 0
    a = run("collector", "analyze", "--raw", "raw", "--out", "res")
    assert "1 run(s) left out by decision" in a.stdout, a.stdout + a.stderr
    assert '"gl": "client on a loaded box"' in (work / "res" / "my-bench" / "index.json").read_text()
