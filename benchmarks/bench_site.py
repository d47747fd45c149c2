"""Time the site build step by step as ``nox -s site`` runs it (goal: ≤ 30 s on these 2-core machines,
installs excluded): each step a fresh process, as nox starts it, so imports count.

Steps: ``import`` (the reference campaign into a raw store of the build's own), ``analyze`` (every campaign,
``--cache``), ``render`` (pages and figures, ``--cache``), ``mkdocs`` (``build --strict``). Scenarios:

- ``cold``: a fresh clone — no imported campaign, no caches;
- ``warm``: the same build again, nothing changed (the import finds the campaign current, every campaign's
  analysis, figure and template comes from the caches);
- ``incremental``: one campaign changed (a ``collector exclude``/``include`` decision recorded in the
  imported reference campaign): that campaign is analysed again, the others and the unchanged figures are
  reused;
- ``before`` (``--before REV``): the code of commit REV (e.g. b90f64b, before the caches), cold, as it was.

Run: ``python benchmarks/bench_site.py [--repeat N] [--before REV] [--publish]``. Prints each build's steps
(wall seconds, and CPU seconds of the step's processes: the box is shared, CPU time moves less with the
others' load) and the medians; writes build/bench/site_build.json, and with ``--publish``
benchmarks/results/site_build.json and the table between the methodology page's ``scale-site`` markers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CAMPAIGN = "rtx4090-qwen2.5-7b"
DEFAULT_SEED = ROOT.parent / "shared" / "seed-runs" / CAMPAIGN
GOAL_S = 30.0
STEPS = ("import", "analyze", "render", "mkdocs")
OUT = ROOT / "build" / "bench" / "site_build.json"
PUBLISHED = ROOT / "benchmarks" / "results" / "site_build.json"
METHODOLOGY = ROOT / "site" / "docs" / "methodology.md"
MARK = "scale-site"


def _cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _step(cmd: list[str], code: Path) -> dict[str, float]:
    """One step in a fresh process (cwd and PYTHONPATH: the code being timed); its wall and CPU seconds."""
    env = {**os.environ, "PYTHONPATH": str(code), "NO_MKDOCS_2_WARNING": "1"}
    cpu, t = _cpu_children(), time.perf_counter()
    done = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if done.returncode != 0:
        sys.exit(f"bench_site: {' '.join(cmd[:4])} … failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(_cpu_children() - cpu, 2)}


def build(code: Path, work: Path, seed: Path, caches: bool) -> dict[str, Any]:
    """The site built once into ``work`` as nox does it; the seconds of each step and the load average."""
    from analysis.report.build import standalone_config  # local import: the config writer of the code here

    py = sys.executable
    imported, results, docs, public = work / "imported-raw", work / "results", work / "docs", work / "public"
    analysis_cache = ["--cache", str(work / "cache" / "analysis")] if caches else []
    report_cache = ["--cache", str(work / "cache" / "report")] if caches else []
    work.mkdir(parents=True, exist_ok=True)
    config = standalone_config(work, docs, public)
    shutil.rmtree(results, ignore_errors=True)  # as nox: derived, emptied every build
    load = os.getloadavg()[0]
    steps = {
        "import": _step(
            [py, "-m", "collector.cli", "import", str(seed), "--campaign", CAMPAIGN, "--raw", str(imported)],
            code,
        ),
        "analyze": _step(
            [py, "-m", "collector.cli", "analyze", "--raw", str(code / "raw"), "--raw", str(imported)]
            + ["--out", str(results), *analysis_cache],
            code,
        ),
        "render": _step(
            [py, "-m", "analysis.report.render", "--results", str(results), "--out", str(docs), "--quiet"]
            + report_cache,
            code,
        ),
        "mkdocs": _step(
            [py, "-m", "analysis.report.build", "--docs", str(docs), "--site-dir", str(public)]
            + ["--config", str(config), "--cache", str(work / "cache" / "site")]
            if caches
            else [py, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(config)],
            code,
        ),
    }
    total = {k: round(sum(s[k] for s in steps.values()), 2) for k in ("wall_s", "cpu_s")}
    return {"steps": steps, "total": total, "load_1min": [round(load, 2), round(os.getloadavg()[0], 2)]}


def _change_one_campaign(work: Path, i: int) -> None:
    """A new input for the reference campaign only, one that changes its findings and pages: a decision
    leaving one of its runs out (each repeat builds in a folder of its own: always the first decision)."""
    from collector.raw.decisions import record_decision  # local import: the store's own writer

    run = work / "imported-raw" / CAMPAIGN / "round1-01-perf-test"
    record_decision(run, "exclude", f"bench_site incremental build {i + 1}")


def _before_code(rev: str, where: Path) -> Path:
    """The committed tree of ``rev`` (git archive), with the repository's raw/ linked in."""
    code = where / f"code-{rev}"
    code.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(code)], input=archive, check=True)
    if not (code / "raw").exists():
        (code / "raw").symlink_to(ROOT / "raw")
    return code


def scenarios(seed: Path, repeat: int, before: str | None, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": [], "incremental": []}
    if before:
        code = _before_code(before, tmp)
        runs["before"] = []
        for i in range(repeat):
            runs["before"].append(build(code, tmp / f"before{i}", seed, caches=False))
            _say("before", i, runs["before"][-1])
    for i in range(repeat):
        work = tmp / f"after{i}"
        for name in ("cold", "warm", "incremental"):
            if name == "incremental":
                _change_one_campaign(work, i)
            runs[name].append(build(ROOT, work, seed, caches=True))
            _say(name, i, runs[name][-1])
    return runs


def _say(name: str, i: int, run: dict[str, Any]) -> None:
    steps = "  ".join(f"{k} {v['wall_s']:.1f}/{v['cpu_s']:.1f}" for k, v in run["steps"].items())
    total = run["total"]
    print(
        f"{name:<11} #{i + 1}: {steps}  total {total['wall_s']:.1f} s wall / {total['cpu_s']:.1f} s CPU "
        f"(load {run['load_1min'][0]:.1f}→{run['load_1min'][1]:.1f})",
        flush=True,
    )


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per step and in total, the median wall and CPU seconds of the repeats."""

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 1)

    steps = {s: {k: med([r["steps"][s][k] for r in runs]) for k in ("wall_s", "cpu_s")} for s in STEPS}
    total = {k: med([r["total"][k] for r in runs]) for k in ("wall_s", "cpu_s")}
    load = med([r["load_1min"][0] for r in runs])
    # the build the others' load disturbed least (ties: the faster)
    quiet = min(runs, key=lambda r: (r["load_1min"][0], r["total"]["wall_s"]))
    quietest = {
        "total_wall_s": quiet["total"]["wall_s"],
        "analyze_wall_s": quiet["steps"]["analyze"]["wall_s"],
    }
    quietest["load_1min"] = quiet["load_1min"][0]
    return {
        "steps": steps,
        "total": total,
        "load_1min_median": load,
        "repeats": len(runs),
        "quietest": quietest,
    }


LABELS = {
    "before": "改动前（b90f64b，无缓存）",
    "cold": "冷启动（新克隆，无缓存）",
    "warm": "无改动重建",
    "incremental": "一个批次有新输入",
}


def table(summary: dict[str, dict[str, Any]]) -> str:
    """The methodology page's table: per scenario, each step's median wall seconds (CPU seconds)."""
    head = "| 情形 | 导入参考批次 | 分析 | 渲染页面与图 | mkdocs | 合计 |\n|---|---|---|---|---|---|\n"
    rows = []
    for name in ("before", "cold", "warm", "incremental"):
        if name not in summary:
            continue
        m = summary[name]
        cells = [f"{m['steps'][s]['wall_s']:.1f}（{m['steps'][s]['cpu_s']:.1f}）" for s in STEPS]
        total = f"**{m['total']['wall_s']:.1f}**（{m['total']['cpu_s']:.1f}）"
        rows.append(f"| {LABELS[name]} | {' | '.join(cells)} | {total} |")
    return head + "\n".join(rows) + "\n"


def text(summary: dict[str, dict[str, Any]]) -> str:
    """The methodology page's block: the question, the answer with the medians, where the time goes, the
    table. The shares inside a step come from cProfile runs of each step on this box (issue #25 note)."""

    def wall(name: str, step: str | None = None) -> str:
        m = summary[name]
        return f"{(m['steps'][step] if step else m['total'])['wall_s']:.0f}"

    before = f"（改动前 {wall('before')} 秒）" if "before" in summary else ""
    cold_ok = "也在目标之内" if summary["cold"]["total"]["wall_s"] <= GOAL_S else "还在目标之外"
    loads = sorted(
        [m["load_1min_median"] for m in summary.values()]
        + [m["quietest"]["load_1min"] for m in summary.values()]
    )
    return (
        f"**站点要多久建好？** 这台 2 核的共用机器上，`nox -s site`（安装之外）什么都没改时重建要 "
        f"{wall('warm')} 秒，一个批次有新输入时 {wall('incremental')} 秒，都在 30 秒的目标之内；"
        f"新克隆、没有任何缓存时 {wall('cold')} 秒{before}，{cold_ok}。\n\n"
        "**时间花在哪里**：冷启动的分析里，近一半 CPU 时间是逐行解析每次抓取的 `/metrics` 文本"
        "（prometheus_client 的解析器，见上面“分析”一节的列式解析）；现在几个批次在各自的进程里同时分析，"
        "所以分析的墙钟时间约等于最大的那个批次。渲染里大半是 vl-convert 把图转成 SVG（每张约 0.3 秒 CPU，"
        "在工作进程里转，两页展示同一张图时只转一次），其余是 jinja 渲染页面；mkdocs 的时间约各一半花在 "
        "Markdown 转 HTML 和 Material 搜索插件用 jieba 给中文分词建索引上。\n\n"
        "**增量**：每个批次的分析结果存在 `build/cache/analysis/<批次>/<键>/`，键是该批次每个已封存运行的 "
        "`SEALED`（即清单 manifest.json 的 sha256，分析前 verify 已逐个文件核对过）、运行之外读到的文件"
        "（计划文件、模型配置）、分析代码（L0–L4 每个文件与相关库的版本）和选项的摘要；图按规格、vl-convert "
        "版本与字体，模板按源文件与 jinja 版本，整站按所有页面、配置、插件版本与构建日期，各自存放。"
        "缓存里任何文件与它记下的 sha256 对不上，就说一行并重算，从不使用。`mkdocs build --dirty` 用不上："
        "它会打一条警告（`--strict` 下构建失败），而且 Material 的搜索索引只在 `mkdocs serve` 的同一个进程里"
        "保留上一次的条目，新进程里只会剩下重建过的页面。\n\n"
        f"下表是 {summary['cold']['repeats']} 次的中位数，秒：墙钟（括号里是这一步所有进程的 CPU 秒）。"
        f"墙钟随共用机器上其他人的负载变化（测量时 1 分钟平均负载 {loads[0]:.1f}–{loads[-1]:.1f}），"
        "CPU 秒变化小得多：冷启动的 CPU 秒只比改动前少一点（做的事基本一样多），墙钟省下的主要来自第二个核——"
        + _quietest(summary)
        + "`python benchmarks/bench_site.py --before b90f64b --publish` 重测并改写本节。\n\n"
        + table(summary)
    )


def _quietest(summary: dict[str, dict[str, Any]]) -> str:
    """A sentence: the cold build and the one before it, each at its lowest load."""
    if "before" not in summary:
        return "机器越忙，省下的越少。"
    c, b = summary["cold"]["quietest"], summary["before"]["quietest"]
    return (
        f"负载最低的一次（1 分钟负载 {c['load_1min']:.1f}）冷启动 {c['total_wall_s']:.0f} 秒、分析 "
        f"{c['analyze_wall_s']:.0f} 秒，改动前（负载 {b['load_1min']:.1f}）是 {b['total_wall_s']:.0f} 秒、"
        f"分析 {b['analyze_wall_s']:.0f} 秒；第二个核被别人占着时，省下的随之变少。"
    )


def publish(doc: dict[str, Any], text_md: str) -> None:
    PUBLISHED.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    page = METHODOLOGY.read_text(encoding="utf-8")
    begin, end = f"<!-- {MARK}:begin -->", f"<!-- {MARK}:end -->"
    a, b = page.index(begin) + len(begin), page.index(end)
    METHODOLOGY.write_text(page[:a] + "\n" + text_md + page[b:], encoding="utf-8")
    print(f"bench_site: wrote {PUBLISHED.relative_to(ROOT)} and the table in {METHODOLOGY.relative_to(ROOT)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=Path, default=DEFAULT_SEED)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", help="also time this commit's code, cold (e.g. b90f64b)")
    ap.add_argument("--publish", action="store_true")
    ap.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        help="print (and --publish) earlier runs' JSON together, time nothing",
    )
    args = ap.parse_args()
    if args.from_json:  # several: their repeats together
        docs = [json.loads(p.read_text(encoding="utf-8")) for p in args.from_json]
        runs = {k: [r for d in docs for r in d["runs"].get(k, [])] for k in docs[0]["runs"]}
        doc = {**docs[0], "medians": {k: medians(r) for k, r in runs.items()}, "runs": runs}
        print(text(doc["medians"]))
        if args.publish:
            publish(doc, text(doc["medians"]))
        return 0
    if not args.seed.is_dir():
        print(f"bench_site: {args.seed} not found; nothing to build", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
        runs = scenarios(args.seed, args.repeat, args.before, Path(tmp))
    summary = {name: medians(r) for name, r in runs.items()}
    doc = {
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "goal_s": GOAL_S,
        "before": args.before,
        "medians": summary,
        "runs": runs,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    md = text(summary)
    print(md)
    for name, m in summary.items():
        verdict = "within" if m["total"]["wall_s"] <= GOAL_S else "OVER"
        print(f"{name}: median {m['total']['wall_s']:.1f} s ({verdict} the {GOAL_S:.0f} s goal)")
    if args.publish:
        publish(doc, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
