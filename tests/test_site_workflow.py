"""The GitHub Pages workflow cannot run here; check that it parses and says what it must."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "pages.yml"


@pytest.fixture(scope="module")
def wf() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _steps(wf: dict) -> list[dict]:
    return [s for job in wf["jobs"].values() for s in job["steps"]]


def test_triggers_on_push_to_main(wf):
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert on["push"]["branches"] == ["main"]


def test_pages_permissions_least_per_job(wf):
    """Nothing by default; the build reads the code, only the deploy job writes Pages (and mints the OIDC
    token deploy-pages needs)."""
    assert wf["permissions"] == {}
    assert wf["jobs"]["build"]["permissions"] == {"contents": "read"}
    assert wf["jobs"]["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}


PINNED = {  # full commit SHAs of the release tags named beside them in the workflows
    "actions/checkout": "11bd71901bbe5b1630ceea73d27597364c9af683",  # v4.2.2
    "actions/setup-python": "a26af69be951a213d495a4c3e4e4022e16d87065",  # v5.6.0
    "actions/upload-pages-artifact": "56afc609e74202658d3ffba0e8f6dda462b719fa",  # v3.0.1
    "actions/deploy-pages": "d6db90164ac5ed86f2b6aed7e0febac5b3c0c03e",  # v4.0.5
}


@pytest.mark.parametrize("name", ["pages.yml", "ci.yml"])
def test_every_action_pinned_to_a_commit(name):
    text = (WORKFLOW.parent / name).read_text(encoding="utf-8")
    uses = re.findall(r"uses: (\S+)@(\S+)( # v[\d.]+)?", text)
    assert uses, "no actions used"
    for action, ref, version in uses:
        assert PINNED.get(action) == ref and version, f"{action}@{ref}: not pinned to a known full SHA"
    doc = yaml.safe_load(text)
    for job in doc["jobs"].values():
        for step in job["steps"]:
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_ci_runs_lint_and_tests_on_push_with_read_only_token():
    doc = yaml.safe_load((WORKFLOW.parent / "ci.yml").read_text(encoding="utf-8"))
    on = doc.get("on", doc.get(True))
    assert "push" in on and "pull_request" in on
    assert doc["permissions"] == {"contents": "read"}
    (job,) = doc["jobs"].values()
    assert job["steps"][-1]["run"] == ".ci/run"  # the README's `nox -s lint && nox -s tests`
    assert "nox -s lint && nox -s tests" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_builds_with_the_nox_session_and_uploads_mkdocs_site_dir(wf):
    build = wf["jobs"]["build"]["steps"]
    runs = [s.get("run", "") for s in build]
    assert any(re.search(r"(^|\s)nox -s site(\s|$)", r) for r in runs)
    upload = next(s for s in build if s.get("uses", "").startswith("actions/upload-pages-artifact"))
    mk = yaml.safe_load(re.sub(r"!!python\S*", "", (ROOT / "mkdocs.yml").read_text(encoding="utf-8")))
    assert upload["with"]["path"] == mk["site_dir"]
    # the upload comes after the build
    assert build.index(upload) > next(i for i, s in enumerate(build) if "nox -s site" in s.get("run", ""))


def test_deploy_job_needs_build_and_uses_pages_environment(wf):
    deploy = wf["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert deploy["environment"]["name"] == "github-pages"
    step = deploy["steps"][0]
    assert step["uses"] == "actions/deploy-pages@" + PINNED["actions/deploy-pages"]
    assert deploy["environment"]["url"] == "${{ steps." + step["id"] + ".outputs.page_url }}"


def test_reference_campaign_fetched_at_its_commit_before_the_build(wf):
    """On GitHub there is no ../shared: the workflow checks out the reference's public source (full history,
    since only a short commit id is known), checks out that commit, and points the noxfile at its Results
    folder through ANATOMY_SEED_CAMPAIGN. Both steps may fail without failing the build."""
    build = wf["jobs"]["build"]["steps"]
    site_at = next(i for i, s in enumerate(build) if "nox -s site" in s.get("run", ""))
    fetch_at, fetch = next(
        (i, s)
        for i, s in enumerate(build)
        if s.get("uses", "").startswith("actions/checkout") and (s.get("with") or {}).get("repository")
    )
    assert fetch["with"]["repository"] == "daleiyang/llm-inference-anatomy"
    assert fetch["with"]["fetch-depth"] == 0  # a short SHA can only be resolved with the history at hand
    assert fetch["continue-on-error"] is True and fetch_at < site_at
    use_at, use = next((i, s) for i, s in enumerate(build) if "ANATOMY_SEED_CAMPAIGN" in s.get("run", ""))
    assert fetch_at < use_at < site_at and use["continue-on-error"] is True
    assert use["if"] == f"steps.{fetch['id']}.outcome == 'success'"
    assert use["working-directory"] == fetch["with"]["path"]
    script = use["run"]
    assert re.search(r"git checkout (--detach )?7eb6a383\b", script)
    assert "01-decode-latency-anatomy/Results" in script and '>> "$GITHUB_ENV"' in script
    assert script.index("git checkout") < script.index("GITHUB_ENV")  # no env var if the commit is missing
    # ... and the noxfile really reads that variable for the reference campaign's folder
    nox_text = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert 'os.environ.get("ANATOMY_SEED_CAMPAIGN"' in nox_text
