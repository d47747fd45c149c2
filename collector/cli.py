"""The `collector` command line: parse options, call one library function per command, map errors.

Each command is one call into a library function of the same name (the sqlite-utils way); library
errors (``AnatomyError``, parse errors included) and operating-system errors (a full disk, a folder that
cannot be written) become a one-line message and exit status 1.
"""

from __future__ import annotations

import functools
import math
import sys
from pathlib import Path
from typing import Any

import click

from collector import __version__
from collector.raw.errors import AnatomyError
from collector.raw.plan import ENGINES

# Only click and the raw contract load for every command: pandas, numpy, altair, httpx, rich and the
# analysis are imported by the command that uses them (`collector --help` in 0.1 s instead of 2.4 s). Each
# such import is marked "# local import: heavy", meaning exactly that.

DEFAULT_RAW = Path("raw")
SLO_ENGINES = ("vllm", "llamacpp")  # analysis.reconcile.slo.ENGINES, kept light (tests/test_cli_quick checks)
DEFAULT_PERCENTILES = (
    "50,90,95,99,99.9"  # analysis.core.metrics.DEFAULT_PERCENTILES (tests/test_cli_quick checks)
)


def _one_line_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AnatomyError as err:
            raise click.ClickException(str(err).splitlines()[0] if str(err) else type(err).__name__) from err
        except OSError as err:
            where = f"{err.filename}: " if err.filename else ""
            raise click.ClickException(f"{where}{err.strerror or err}") from err

    return wrapper


class _PositiveFinite(click.ParamType):
    """A number > 0 and finite (click's FloatRange lets ``nan`` through: every comparison with it is
    false)."""

    name = "number"

    def convert(self, value, param, ctx) -> float:
        try:
            v = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not (0 < v < math.inf):
            self.fail(f"must be a finite number > 0, got {value!r}", param, ctx)
        return v


POSITIVE = _PositiveFinite()
PORT = click.IntRange(1, 65_535)

raw_option = click.option(
    "--raw",
    "raw",
    type=click.Path(path_type=Path, file_okay=False),
    default=DEFAULT_RAW,
    show_default=True,
    help="Root of the raw store.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="collector")
def main() -> None:
    """Compute first, then measure, then reconcile (先算，再测，然后对账)."""


# --raw for the commands that read several raw stores (analyze, slo)
_raw_roots = click.option(
    "--raw",
    "raws",
    type=click.Path(path_type=Path, file_okay=False),
    multiple=True,
    default=[DEFAULT_RAW],
    show_default=True,
    help="Root of a raw store; repeat to read several (e.g. raw/ and an imported reference).",
)


@main.command(name="plan")  # the theory sheet; the name users type stays
@click.option(
    "--model", required=True, help="Bundled model name (e.g. Qwen2.5-7B-Instruct) or a config.json path."
)
@click.option("--gpu", required=True, help="GPU name from the bundled datasheet table (e.g. rtx4090, h200).")
@click.option("--kv-pool-gib", type=POSITIVE, default=None, help="KV pool size in GiB (default: estimated).")
@click.option("--max-model-len", type=int, default=None, help="Context length per request.")
@click.option("--kv-dtype", default="bf16", show_default=True, help="KV cache dtype: bf16, fp16, fp8, q8_0.")
@click.option(
    "--weight-format",
    default="bf16",
    show_default=True,
    help="bf16, fp16, or a GGUF type (q4_k_m, q8_0, ...).",
)
@click.option(
    "--block-size", type=int, default=16, show_default=True, help="KV block size in tokens (vLLM GPU: 16)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON with snake_case keys carrying units.")
@_one_line_errors
def theory_sheet(
    model, gpu, kv_pool_gib, max_model_len, kv_dtype, weight_format, block_size, as_json
) -> None:
    """Print the theory for a model on a GPU: params, KV bytes, FLOPs, decode floor, pool capacity."""
    from collector.protocol.theory_sheet import theory_sheet_text  # local import: heavy

    click.echo(
        theory_sheet_text(
            model=model,
            gpu=gpu,
            kv_pool_gib=kv_pool_gib,
            max_model_len=max_model_len,
            kv_dtype=kv_dtype,
            weight_format=weight_format,
            block_size=block_size,
            as_json=as_json,
        )
    )


@main.command(name="init")
@click.option(
    "--model",
    type=click.Path(path_type=Path),
    default=None,
    help="A .gguf file or a Hugging Face model folder (config.json, tokenizer.json); with --url: the served "
    "model name (default: the server's first).",
)
@click.option(
    "--url",
    default=None,
    help="A running OpenAI-compatible server to attach to (http://host:port): the plan asks it for the "
    "engine and the model instead of starting one.",
)
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), default=Path("plan.toml"), show_default=True
)
@click.option("--engine-path", type=click.Path(path_type=Path), default=None, help="The llama-server to use.")
@click.option(
    "--vllm-python", type=click.Path(path_type=Path), default=None, help="A python that imports vllm."
)
@click.option("--campaign", default=None, help="Campaign name (default: <gpu>-<model>; with --url: quick).")
@click.option("--port", type=PORT, default=None, help="Server port (default: a free one).")
@click.option("--max-model-len", type=int, default=None, help="Context per request (default: from the box).")
@click.option("--model-config", default=None, help="With --url: the theory's config (see `run --help`).")
@click.option(
    "--gpu", default=None, help="With --url: the GPU's datasheet name (default: nvidia-smi, else cpu)."
)
@_one_line_errors
def init_(model: Path | None, url: str | None, out: Path, campaign: str | None, **box: Any) -> None:
    """Write a commented plan for this box: engine, model, GPU, a free port; or, with --url, for a running
    server (a concurrency sweep and an open-loop rate phase). Never replaces a file."""
    if url is not None:
        from collector.protocol import quick  # local import: heavy (httpx, the GGUF reader)

        spec = quick.init_spec(url, str(model) if model else None, campaign, box["model_config"], box["gpu"])
        for line in quick.write_new_plan(spec, Path(out)):
            click.echo(line)
        return
    if model is None:
        raise click.UsageError("give --model (a .gguf or a model folder) or --url (a running server)")
    from collector.protocol.init import init_plan  # local import: heavy (the GGUF reader)

    result = init_plan(
        out,
        model,
        engine_path=box["engine_path"],
        vllm_python=box["vllm_python"],
        campaign=campaign,
        port=box["port"],
        max_model_len=box["max_model_len"],
    )
    for line in result.lines:
        click.echo(line)


@main.command(name="import")
@click.argument("src", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--campaign", required=True, help="Campaign name under raw/.")
@click.option(
    "--engine",
    type=click.Choice([*ENGINES, "unknown"]),
    default=None,
    help="The server the peer's results measured (vllm bench serve, AIPerf and GuideLLM do not record it).",
)
@raw_option
@_one_line_errors
def import_(src: Path, campaign: str, engine: str | None, raw: Path) -> None:
    """Import an existing results folder into the raw store (byte-identical, with provenance): hand-run
    campaigns, vllm bench serve --save-result files (any name), AIPerf artifact folders, GuideLLM reports."""
    from collector.protocol.importer import import_results  # local import: heavy (the parsers)

    for line in import_results(src, campaign=campaign, raw_root=raw, engine=engine):
        click.echo(line)


@main.command()
@raw_option
@_one_line_errors
def verify(raw: Path) -> None:
    """Re-hash every run under the raw store; report changed, missing or unexpected files."""
    from collector.raw.store import verify as verify_fn  # local import: heavy (kept with its siblings)

    report = verify_fn(raw)
    for line in report.lines():
        click.echo(line)
    if not report.ok:
        sys.exit(1)


@main.command()
@raw_option
@click.argument("campaign", required=False)
@_one_line_errors
def inspect(raw: Path, campaign: str | None) -> None:
    """Print, per run, what the parsers found in it."""
    from collector.protocol.inspect import inspect as inspect_fn  # local import: heavy (the parsers)

    for line in inspect_fn(raw, campaign):
        click.echo(line)


@main.command()
@_raw_roots
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("build/results"),
    show_default=True,
    help="Where tables, figure specs and findings.json are written.",
)
@click.option(
    "--no-verify",
    "no_verify",
    is_flag=True,
    help="Forensics: read runs without checking their seals first; the results say 'verified: false'.",
)
@click.option(
    "--slo",
    "slos",
    multiple=True,
    help="A per-request SLO for goodput, NAME=MS with NAME ttft_ms, tpot_ms, itl_ms or e2e_ms; repeatable.",
)
@click.option(
    "--goodput",
    "goodput",
    multiple=True,
    help="The same SLOs as vllm bench serve spells them: KEY:MS with KEY ttft, tpot, itl or e2el "
    "(--goodput ttft:730 --goodput tpot:50, or one quoted 'ttft:730 tpot:50').",
)
@click.option(
    "--metric-percentiles",
    "--percentiles",
    "percentiles",
    default=DEFAULT_PERCENTILES,
    show_default=True,
    help="The latency percentiles the per-point tables report, comma-separated (vllm bench serve's "
    "--metric-percentiles); p50/p90/p99 are always computed.",
)
@click.option(
    "--cache",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Keep each campaign's results here and reuse them while its runs and the analysis code are "
    "unchanged (keyed by the runs' seals; e.g. build/cache/analysis).",
)
@click.argument("campaigns", nargs=-1)
@_one_line_errors
def analyze(
    raws: tuple[Path, ...],
    out: Path,
    campaigns: tuple[str, ...],
    no_verify: bool,
    slos: tuple[str, ...],
    goodput: tuple[str, ...],
    percentiles: str,
    cache: Path | None,
) -> None:
    """Reconcile theory and measurement: tables, Vega-Lite specs and findings.json per campaign.

    Every run read is verified first (as `collector verify` does); a changed run stops the analysis; a run
    `collector exclude` left out is read but kept out of the conclusions."""
    from analysis.core import metrics  # local import: heavy (numpy)
    from analysis.pipeline.analyze import analyze as analyze_fn  # local import: heavy (pandas, altair)
    from analysis.reconcile import slo as slo_lib  # local import: heavy (pandas)

    slos_ms = {**slo_lib.parse_slos(list(slos)), **metrics.parse_goodput(goodput)}
    qs = metrics.parse_percentiles(percentiles)
    for line in analyze_fn(
        list(raws),
        out,
        list(campaigns) or None,
        verify=not no_verify,
        slos_ms=slos_ms,
        percentiles=qs,
        cache=cache,
    ):
        click.echo(line)


@main.command()
@_raw_roots
@click.option(
    "--p99",
    "p99",
    multiple=True,
    help="A p99 budget as KEY:MS, KEY ttft (required) or itl — vllm bench serve's --goodput spelling, on the "
    "p99 (--p99 ttft:730 --p99 itl:50, or one quoted 'ttft:730 itl:50').",
)
# the first spelling, kept working: the same budgets as --p99 ttft:MS / itl:MS
@click.option("--ttft-p99-ms", "ttft", type=POSITIVE, default=None, hidden=True)
@click.option("--itl-p99-ms", "itl", type=POSITIVE, default=None, hidden=True)
@click.option("--engine", type=click.Choice(SLO_ENGINES), default=None, help="One engine only.")
@click.option("--campaign", "campaigns", multiple=True, help="One campaign (repeatable); default: all.")
@_one_line_errors
def slo(
    raws: tuple[Path, ...],
    p99: tuple[str, ...],
    ttft: float | None,
    itl: float | None,
    engine: str | None,
    campaigns: tuple[str, ...],
):
    """The SLO planner: per campaign, round and engine, the highest concurrency meeting the p99 budget(s),
    interpolated between measured points, the goodput there and the engine settings that follow; per
    open-loop rate sweep, the highest request rate meeting them."""
    from analysis.pipeline.analyze import slo_answers  # local import: heavy (pandas, altair)
    from analysis.reconcile import slo as slo_lib  # local import: heavy (pandas)

    budgets = {
        **{k: v for k, v in (("ttft", ttft), ("itl", itl)) if v is not None},
        **slo_lib.parse_p99_budgets(p99),
    }
    if "ttft" not in budgets:
        raise click.UsageError("needs a p99 TTFT budget: --p99 ttft:MS (e.g. --p99 ttft:730)")
    for ans in slo_answers(list(raws), budgets["ttft"], budgets.get("itl"), engine, list(campaigns) or None):
        for line in slo_lib.describe_any(ans):
            click.echo(line)


@main.command()
@_raw_roots
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("site"),
    show_default=True,
    help="Where the static site is written.",
)
@click.option(
    "--work",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Keep the analysis results and rendered pages here (default: a temporary folder).",
)
@click.argument("campaigns", nargs=-1)
@_one_line_errors
def report(raws: tuple[Path, ...], out: Path, work: Path | None, campaigns: tuple[str, ...]) -> None:
    """Build the report site from raw stores, from any folder: analyze the campaigns (default: every one in
    the --raw roots, and only those), render their pages, `mkdocs build --strict` into --out. Needs the
    site extra (pip install 'inference-anatomy[site]')."""
    import tempfile  # local import: only this command needs it

    try:
        from analysis.report.build import report_site  # local import: heavy (pandas, altair, jinja2)
    except ImportError as err:  # the site extra is not installed
        raise click.ClickException(
            f"collector report needs the site extra ({err.name} is missing): "
            "pip install 'inference-anatomy[site]'"
        ) from err

    with tempfile.TemporaryDirectory(prefix="collector-report-") as tmp:
        work_dir = Path(work) if work is not None else Path(tmp)
        work_dir.mkdir(parents=True, exist_ok=True)
        report_site(list(raws), Path(out), work_dir, list(campaigns) or None, on_line=click.echo)


@main.command()
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--reason", required=True, help="Why the run is left out (printed wherever it is).")
@click.option("--include", is_flag=True, help="Take an earlier exclusion back (the last decision wins).")
@_one_line_errors
def exclude(run_dir: Path, reason: str, include: bool) -> None:
    """Leave a run (RAW/CAMPAIGN/RUN) out of its campaign's conclusions: a decision appended to
    RAW/CAMPAIGN/decisions.jsonl beside the sealed run, which is never edited; `collector analyze` then reads
    the campaign without it and lists it under excluded_runs."""
    from collector.raw.decisions import record_decision  # local import: kept with the store's siblings

    click.echo(record_decision(run_dir, "include" if include else "exclude", reason))


@main.command()
@click.option(
    "--recover",
    is_flag=True,
    required=True,
    help="Finish a seal interrupted after measuring ended (the run's events end in run_end).",
)
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path, file_okay=False))
@_one_line_errors
def seal(recover: bool, run_dir: Path) -> None:
    """Seal an interrupted run whose measuring had ended; refuses (and says why) otherwise."""
    # `collector run` seals its own runs; --recover (required) is the only way to seal one afterwards
    from collector.raw.store import recover_seal  # local import: heavy (kept with its siblings)

    click.echo(recover_seal(run_dir))


# vllm bench serve's flags, by its names and defaults (collector/protocol/quick.py says what each one means)
_QUICK_OPTIONS = [
    click.option("--base-url", default=None, help="The server to attach to (vllm bench serve's --base-url)."),
    click.option("--host", default=None, help="With --port instead of --base-url (default 127.0.0.1)."),
    click.option("--port", type=int, default=None, help="With --host instead of --base-url (default 8000)."),
    click.option("--model", default=None, help="The served model name (default: the server's first)."),
    click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default=None,
        help="The engine behind the URL (default: recognised from /metrics and /props).",
    ),
    click.option(
        "--model-config",
        default=None,
        help="The theory's config: a bundled name, config.json, its folder or a .gguf (default: "
        "the files the server names, else --model as a bundled name or Hub id).",
    ),
    click.option("--tokenizer", default=None, help="A tokenizer.json or its folder (prompt token ids)."),
    click.option("--gpu", default=None, help="The GPU's datasheet name (default: nvidia-smi, else cpu)."),
    click.option(
        "--endpoint",
        default="/v1/completions",
        show_default=True,
        help="/v1/completions or /v1/chat/completions.",
    ),
    click.option("--backend", default="openai", show_default=True, help="openai or openai-chat."),
    click.option("--num-prompts", type=int, default=1000, show_default=True, help="Requests per point."),
    click.option(
        "--request-rate",
        default="inf",
        show_default=True,
        help="Requests/s (Poisson); inf sends all at once; a comma list sweeps (one point each).",
    ),
    click.option(
        "--max-concurrency",
        default=None,
        help="Requests in flight at most; with rate inf a closed loop; a comma list sweeps.",
    ),
    click.option(
        "--burstiness",
        type=float,
        default=1.0,
        show_default=True,
        help="Gamma shape of the arrivals (1 = Poisson).",
    ),
    click.option("--random-input-len", type=int, default=1024, show_default=True),
    click.option("--random-output-len", type=int, default=128, show_default=True),
    click.option("--random-range-ratio", type=float, default=0.0, show_default=True),
    click.option("--random-prefix-len", type=int, default=0, show_default=True),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option(
        "--num-warmups",
        type=int,
        default=None,
        help="Warm-up requests before the points (default: twice the first concurrency, <= 16).",
    ),
    click.option("--goodput", multiple=True, help="SLOs as KEY:MS (ttft, tpot, itl, e2el); repeatable."),
    click.option("--header", "headers", multiple=True, help="KEY=VALUE sent with every request."),
    click.option("--ignore-eos", is_flag=True, help="Always on: every request asks for exactly its length."),
    click.option(
        "--percentile-metrics",
        default="ttft,tpot,itl",
        show_default=True,
        help="Accepted for vllm bench serve's command lines; the summary shows ttft, tpot, itl.",
    ),
    click.option(
        "--metric-percentiles",
        default="50,99",
        show_default=True,
        help="Accepted; the summary shows p50 and p99, `collector analyze` takes any.",
    ),
    click.option(
        "--save-result",
        is_flag=True,
        help="Also write each point's result in vllm bench serve's schema and default file name.",
    ),
    click.option("--result-dir", type=click.Path(path_type=Path, file_okay=False), default=None),
    click.option("--result-filename", default=None, help="One point: this name; several: a -pNN suffix."),
    click.option("--label", default=None, help="The run's name under the campaign (and the results' label)."),
    click.option("--campaign", default="quick", show_default=True, help="The campaign under --raw."),
    click.option(
        "--save-plan",
        type=click.Path(path_type=Path, dir_okay=False),
        default=None,
        help="Keep the plan the flags made here (run it again with `collector run FILE`).",
    ),
]


def _quick_options(fn):
    """vllm bench serve's flags (``_QUICK_OPTIONS``) on a command."""
    for opt in reversed(_QUICK_OPTIONS):
        fn = opt(fn)
    return fn


@main.command(context_settings={"max_content_width": 110})
@click.argument("plan_file", required=False, type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--plan",
    "plan_opt",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    default=None,
    help="The measurement plan (the full protocol); the same as giving it as the argument.",
)
@raw_option
@_quick_options
@_one_line_errors
def run(plan_file: Path | None, plan_opt: Path | None, raw: Path, **quick_flags) -> None:
    """Measure a real server into a sealed run of the raw store: from a plan (PLAN_FILE or --plan), or from
    vllm bench serve's flags against a running server (--base-url URL --model NAME ...).

    Exit status: 0 when every measured point is usable; 1 when the run failed, or completed but analysis would
    exclude every point; 3 when it completed but analysis will leave some points out (each is named, with
    what to change)."""
    from collector.protocol.run import execute_run, verdict  # local import: heavy (httpx, rich, numpy)

    plan_path = plan_file or plan_opt
    attach = quick_flags["base_url"] or quick_flags["host"] or quick_flags["port"]
    if plan_path is not None and attach:
        raise click.UsageError("give a plan or --base-url (vllm bench serve's flags), not both")
    if plan_path is None and not attach:
        raise click.UsageError(
            "give a plan (collector run PLAN.toml) or a server: --base-url URL [--model NAME]"
        )
    tmp = None
    if plan_path is None:
        plan_path, tmp = _quick_plan(quick_flags)
    try:
        result = execute_run(plan_path, raw_root=raw, console=_console())
    finally:
        if tmp is not None:
            tmp.cleanup()
    click.echo(str(result))
    if quick_flags["save_result"]:
        from collector.protocol import quick  # local import: heavy (httpx)

        for line in quick.save_results(
            result.vllm_bench, quick_flags["result_dir"], quick_flags["result_filename"]
        ):
            click.echo(line)
    v = verdict(result)  # the collector's own checks decide; the command maps the verdict to the exit status
    if v.status == "unusable":
        raise click.ClickException(f"{result.path}: complete, but unusable: {v.unusable}")
    if v.status == "partial":
        click.echo(
            f"{result.path}: analysis will leave out {len(v.left_out)} of {v.measured} points:", err=True
        )
        for point, reason in v.left_out.items():
            click.echo(f"  {point}: {reason}", err=True)
        sys.exit(3)


def _console():
    """rich's console on stderr; in a log (not a terminal) wide enough that no point id is cut."""
    from rich.console import Console  # local import: heavy

    return Console(stderr=True, width=None if sys.stderr.isatty() else 200)


def _quick_plan(flags: dict):
    """The plan vllm bench serve's flags make (collector.protocol.quick): written to --save-plan, else to a
    temporary
    folder (the sealed run keeps its copy as plan.toml either way)."""
    import tempfile  # local import: only this path needs it

    from collector.protocol import quick  # local import: heavy (httpx, the GGUF reader)

    spec = quick.spec_from_flags(flags)
    tmp = None
    out = flags["save_plan"]
    if out is None:
        tmp = tempfile.TemporaryDirectory(prefix="collector-quick-")
        out = Path(tmp.name) / f"{spec.campaign}-{spec.label or 'run'}.toml"
    for line in quick.write_new_plan(spec, Path(out)):
        click.echo(line, err=True)
    return Path(out), tmp


if __name__ == "__main__":  # pragma: no cover
    main()
