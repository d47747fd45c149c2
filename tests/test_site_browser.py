"""The built site in a real headless Chromium, served on 127.0.0.1 with every other host blocked.

Every page loads with no console error and no failed request; every figure is a non-empty SVG that the
browser decoded; every internal link (and anchor) resolves; a Chinese query in the search box finds the right
page. Screenshots of the home page and one report go to build/test-artifacts/.
"""

from __future__ import annotations

import os
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NoReturn

import browser as br  # tests/browser.py (pytest puts tests/ on sys.path)
import pytest

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site() -> br.BuiltSite:
    return br.built_site()  # every campaign there is, plus a synthetic GPU campaign (see tests/browser.py)


def _missing(what: str) -> NoReturn:
    """Skip locally; in CI (env CI set) a browser test that cannot run is a failure, never a silent skip."""
    if os.environ.get("CI"):
        pytest.fail(f"browser test cannot run in CI: {what}", pytrace=False)
    pytest.skip(f"{what}; browser test skipped")


@pytest.fixture(scope="module")
def chromium():
    exe = br.find_chromium()
    if exe is None:
        _missing("no Chromium installed (Debian: apt-get install chromium fonts-noto-cjk)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing(
            "python package playwright not installed (pip install playwright; no browser download needed)"
        )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, headless=True, args=br.CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def base_url(site):
    with br.serve(site.site) as url:
        yield url


class PageWatch:
    """Console errors, uncaught exceptions, failed or blocked requests of one page."""

    def __init__(self, page, base_url: str):
        self.errors: list[str] = []
        self.blocked: list[str] = []
        host = urllib.parse.urlsplit(base_url).netloc

        def route(r):
            if urllib.parse.urlsplit(r.request.url).netloc == host or r.request.url.startswith("data:"):
                r.continue_()
            else:
                self.blocked.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on(
            "console",
            lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.on("requestfailed", lambda r: self.errors.append(f"requestfailed: {r.url} {r.failure}"))
        page.on(
            "response", lambda r: self.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None
        )


def _new_page(chromium, base_url, **kw):
    kw.setdefault("viewport", {"width": 1280, "height": 900})
    ctx = chromium.new_context(locale="zh-CN", **kw)
    page = ctx.new_page()
    return ctx, page, PageWatch(page, base_url)


def test_every_page_loads_clean_and_every_figure_renders(site, chromium, base_url):
    pages = br.html_pages(site.site)
    assert len(pages) >= 12, pages
    ctx, page, watch = _new_page(chromium, base_url)
    figures_seen = set()
    for rel in pages:
        page.goto(base_url + rel, wait_until="load")
        page.wait_for_load_state("networkidle")
        assert page.locator("h1").count() >= 1, f"{rel}: no h1"
        imgs = page.locator("figure.ia-figure img")
        for i in range(imgs.count()):
            img = imgs.nth(i)
            img.scroll_into_view_if_needed()
            img.evaluate("el => el.decode()")  # lazy images: wait until decoded
            w = img.evaluate("el => el.naturalWidth")
            src = img.evaluate("el => el.src")
            assert w > 0, f"{rel}: figure {src} did not render"
            figures_seen.add(urllib.parse.urlsplit(src).path)
    assert not watch.errors, "\n".join(watch.errors)
    assert not watch.blocked, f"pages tried to reach other hosts: {watch.blocked}"
    ctx.close()
    svgs = {
        "/" + p.relative_to(site.site).as_posix() for p in site.site.rglob("*.svg") if "figures" in p.parts
    }
    assert svgs and figures_seen == svgs, f"figures not shown on any page: {sorted(svgs - figures_seen)}"
    for svg in svgs:
        text = (site.site / svg.lstrip("/")).read_text(encoding="utf-8")
        assert "<path" in text and re.search(r"[\u4e00-\u9fff]", text), (
            f"{svg}: empty or without Chinese text"
        )


# Text the browser draws outside its SVG is cut off (the figure is an <img>): vl-convert laid the chart out
# with its own font metrics, so a legend label it measured narrower than the browser draws it is clipped. And
# two titles drawn over each other (a long panel title into its neighbour's) are unreadable.
_SVG_TEXT_FITS = """() => {
  const svg = document.querySelector('svg');
  const W = svg.width.baseVal.value, H = svg.height.baseVal.value, out = [];
  const boxes = [];
  for (const t of svg.querySelectorAll('text')) {
    const r = t.getBoundingClientRect(), s = t.textContent.trim();
    if (!s) continue;
    if (r.left < -0.5 || r.top < -0.5 || r.right > W + 0.5 || r.bottom > H + 0.5)
      out.push(`${s}: drawn at x ${Math.round(r.left)}..${Math.round(r.right)}, y ${Math.round(r.top)}..` +
               `${Math.round(r.bottom)} outside the ${W} x ${H} image`);
    if (t.closest('.role-title-text')) boxes.push([s, r]);
  }
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, p] = boxes[i], [b, q] = boxes[j];
    if (p.left < q.right - 2 && q.left < p.right - 2 && p.top < q.bottom - 2 && q.top < p.bottom - 2)
      out.push(`${a} overlaps ${b}`);
  }
  return out;
}"""


def test_every_figure_text_fits_inside_its_svg(site, chromium, base_url):
    """Every title, legend label and axis text of every figure of every campaign lies inside its SVG, as the
    browser draws it with the page's font stack, and no two titles (the chart's, its panels', its rows')
    overlap."""
    ctx, page, _ = _new_page(chromium, base_url)
    svgs = sorted(p for p in site.site.rglob("*.svg") if "figures" in p.parts)
    assert len(svgs) >= 30, svgs
    problems = []
    for svg in svgs:
        rel = svg.relative_to(site.site).as_posix()
        page.goto(base_url + rel, wait_until="load")
        problems += [f"{rel}: {p}" for p in page.evaluate(_SVG_TEXT_FITS)]
    ctx.close()
    assert not problems, "\n".join(problems[:30])


def test_internal_links_resolve(site, chromium, base_url):
    ctx, page, _ = _new_page(chromium, base_url)
    links: set[str] = set()
    for rel in br.html_pages(site.site):
        page.goto(base_url + rel, wait_until="domcontentloaded")
        for href in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)"):
            if href.startswith(base_url):
                links.add(href)
    ctx.close()
    assert len(links) > 50
    problems = []
    for href in sorted(links):
        parts = urllib.parse.urlsplit(href)
        try:
            with urllib.request.urlopen(urllib.parse.urlunsplit(parts._replace(fragment=""))) as resp:
                body = resp.read().decode("utf-8", "replace")
        except Exception as err:  # noqa: BLE001 - any failure is a broken link
            problems.append(f"{href}: {err}")
            continue
        frag = urllib.parse.unquote(parts.fragment)
        if frag and f'id="{frag}"' not in body:
            problems.append(f"{href}: no element with id {frag!r}")
    assert not problems, "\n".join(problems[:30])


@pytest.mark.parametrize(
    ("query", "expected_page"),
    [
        ("并发", "/concurrency/"),
        ("抢占", "/overload/"),
        ("首 token 延迟", "/ttft/"),
        ("首token", "/ttft/"),
        ("预填充", "/ttft/"),
    ],  # fmt: skip
)
def test_chinese_search_finds_the_right_page(site, chromium, base_url, query, expected_page):
    ctx, page, watch = _new_page(chromium, base_url)
    page.goto(base_url, wait_until="networkidle")
    box = page.locator("input.md-search__input")
    box.click()  # at desktop width the search box sits in the header
    box.fill(query)
    # Material reads the query on keyup; filling CJK text (as an IME would) fires no key event.
    box.press("End")
    page.wait_for_selector(".md-search-result__item", timeout=15000)
    hrefs = page.eval_on_selector_all(".md-search-result__item a", "els => els.map(e => e.href)")
    assert any(expected_page in h for h in hrefs[:10]), f"{query!r}: top results {hrefs[:10]}"
    assert not watch.errors, "\n".join(watch.errors)
    ctx.close()


# Pages the renderer writes (the hand-written method pages are prose of their own).
def _report_pages(site: br.BuiltSite) -> list[str]:
    return [
        rel
        for rel in br.html_pages(site.site)
        if rel == "" or rel.startswith(("campaigns/", "comparison/", "structure/", "data/"))
    ]


# The article's text as a reader sees it, without code, citations of files and fields, and hashes.
VISIBLE_PROSE = """() => {
  const art = document.querySelector('article').cloneNode(true);
  art.querySelectorAll('code, pre, svg, script, style, .ia-srcs, .ia-src, .ia-hash').forEach(e => e.remove());
  return art.textContent;
}"""
FINDING_KEY = re.compile(r"\w+\.\w+_\w+")
# A Python list or dict printed into the text: ['a', …], {'a': …}, [1, 2, 3, …] (an interval [a, b] is prose).
PYTHON_REPR = re.compile(r".{0,20}(\[['\"]|\{['\"]|\[\]|\{\}|\[-?\d[\d.]*(, -?\d[\d.]*){2,}\]).{0,20}")


def test_every_report_page_opens_with_its_conclusion(site, chromium, base_url):
    """On the first screen (1400 × 900) of every generated page: a conclusion box."""
    ctx = chromium.new_context(viewport={"width": 1400, "height": 900}, locale="zh-CN")
    page = ctx.new_page()
    missing = []
    for rel in _report_pages(site):
        page.goto(base_url + rel, wait_until="domcontentloaded")
        box = page.locator("article .admonition.abstract").first
        bb = box.bounding_box() if box.count() else None
        if bb is None or bb["y"] > 900 or "结论" not in box.inner_text():
            missing.append(rel or "home")
    ctx.close()
    assert not missing, f"pages whose first screen holds no conclusion: {missing}"


def test_pages_read_as_chinese_prose(site, chromium, base_url):
    """No Markdown table left as text, no finding keys, no Python lists or dicts in what a reader reads."""
    ctx, page, _ = _new_page(chromium, base_url)
    problems = []
    for rel in br.html_pages(site.site):
        page.goto(base_url + rel, wait_until="domcontentloaded")
        for p in page.eval_on_selector_all("article p", "els => els.map(e => e.innerText)"):
            if any(line.strip().startswith("|") for line in p.splitlines()):
                problems.append(f"{rel}: a table left as text: {p[:60]!r}")
        prose = page.evaluate(VISIBLE_PROSE)
        for key in sorted(set(FINDING_KEY.findall(prose))):
            problems.append(f"{rel}: key-like token {key!r}")
        for m in PYTHON_REPR.finditer(prose):
            problems.append(f"{rel}: a repr in the text: {m.group(0)!r}")
    ctx.close()
    assert not problems, "\n".join(problems[:30])


def test_reproducibility_headline_is_per_engine(site, chromium, base_url):
    """The reference's two rounds: vLLM moved ≤ a few %, llama.cpp (slots changed) far more — never one
    max."""
    if br.REFERENCE_CAMPAIGN not in site.campaigns:
        pytest.skip("reference campaign not present")
    ctx, page, _ = _new_page(chromium, base_url)
    page.goto(base_url + f"campaigns/{br.REFERENCE_CAMPAIGN}/reproducibility/", wait_until="domcontentloaded")
    box = page.locator("article .admonition.abstract").first.inner_text()
    ctx.close()
    lines = [line for line in box.splitlines() if "最多相差" in line]
    assert any(line.startswith("vLLM（bf16）") for line in lines), box
    assert any(line.startswith("llama.cpp（Q4_K_M）") for line in lines), box
    assert "较大者" not in box


def test_screenshots(site, chromium, base_url):
    br.ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = br.REFERENCE_CAMPAIGN if br.REFERENCE_CAMPAIGN in site.campaigns else site.synthetic
    shots = {
        "home.png": ("", {}),
        "report-concurrency.png": (f"campaigns/{report}/concurrency/", {}),
        "report-dark.png": (
            f"campaigns/{report}/{'overload' if report == br.REFERENCE_CAMPAIGN else 'kv'}/",
            {"color_scheme": "dark"},
        ),
        "own-campaign-engines.png": (f"campaigns/{site.synthetic}/engines/", {}),
        "structure.png": (f"structure/{report}/", {}),
    }
    if (site.site / "comparison" / "index.html").exists():
        shots["comparison.png"] = ("comparison/", {})
    for c in site.campaigns:
        if c not in (br.REFERENCE_CAMPAIGN, site.synthetic):
            shots[f"campaign-{c}.png"] = (f"campaigns/{c}/", {})
            for slug in (
                "engines",
                "overload",
            ):  # our own campaigns' pages that differ most from the reference
                if (site.site / "campaigns" / c / slug / "index.html").exists():
                    shots[f"campaign-{c}-{slug}.png"] = (f"campaigns/{c}/{slug}/", {})
    # the reader's view at 1400 px: the home page and one campaign's overview, whole and first screen
    wide = {"viewport": {"width": 1400, "height": 900}}
    for name, rel in (("home-1400.png", ""), ("campaign-1400.png", f"campaigns/{report}/")):
        shots[name] = (rel, wide)
        shots[name.replace(".png", "-first-screen.png")] = (rel, {**wide, "full_page": False})
    for name, (rel, kw) in shots.items():
        kw = dict(kw)
        full = kw.pop("full_page", True)
        ctx, page, watch = _new_page(chromium, base_url, **kw)
        page.goto(base_url + rel, wait_until="networkidle")
        out: Path = br.ARTIFACTS / name
        page.screenshot(path=str(out), full_page=full)
        assert out.stat().st_size > 10_000, f"{name}: screenshot suspiciously small"
        assert not watch.errors, "\n".join(watch.errors)
        ctx.close()
