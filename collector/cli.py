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

import click

from analysis import metrics
from analysis.pipeline import analyze as analyze_fn
from analysis.pipeline import slo_plan
from analysis.reconcile import slo as slo_lib
from analysis.reconcile.gates import OWN_POINT_CHECKS, SEVERITY
from collector import __version__
from collector.importer import import_results
from collector.init import init_plan
from collector.inspect import inspect as inspect_fn
from collector.plan import plan as plan_fn
from collector.raw.errors import AnatomyError
from collector.raw.store import recover_seal
from collector.raw.store import verify as verify_fn
from collector.run import RunResult, execute_run

DEFAULT_RAW = Path("raw")


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


@main.command()
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
def plan(model, gpu, kv_pool_gib, max_model_len, kv_dtype, weight_format, block_size, as_json) -> None:
    """Print the theory for a model on a GPU: params, KV bytes, FLOPs, decode floor, pool capacity."""
    click.echo(
        plan_fn(
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
    required=True,
    type=click.Path(path_type=Path),
    help="A .gguf file or a Hugging Face model folder (config.json, tokenizer.json).",
)
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), default=Path("plan.toml"), show_default=True
)
@click.option("--engine-path", type=click.Path(path_type=Path), default=None, help="The llama-server to use.")
@click.option(
    "--vllm-python", type=click.Path(path_type=Path), default=None, help="A python that imports vllm."
)
@click.option("--campaign", default=None, help="Campaign name (default: <gpu>-<model>).")
@click.option("--port", type=PORT, default=None, help="Server port (default: a free one).")
@click.option("--max-model-len", type=int, default=None, help="Context per request (default: from the box).")
@_one_line_errors
def init_(model, out, engine_path, vllm_python, campaign, port, max_model_len) -> None:
    """Write a commented plan for this box: engine, model, GPU, a free port. Never replaces a file."""
    result = init_plan(
        out,
        model,
        engine_path=engine_path,
        vllm_python=vllm_python,
        campaign=campaign,
        port=port,
        max_model_len=max_model_len,
    )
    for line in result.lines:
        click.echo(line)


@main.command(name="import")
@click.argument("src", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--campaign", required=True, help="Campaign name under raw/.")
@raw_option
@_one_line_errors
def import_(src: Path, campaign: str, raw: Path) -> None:
    """Import an existing results folder into the raw store (byte-identical, with provenance)."""
    for line in import_results(src, campaign=campaign, raw_root=raw):
        click.echo(line)


@main.command()
@raw_option
@_one_line_errors
def verify(raw: Path) -> None:
    """Re-hash every run under the raw store; report changed, missing or unexpected files."""
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
    "--metric-percentiles",
    "--percentiles",
    "percentiles",
    default=",".join(f"{q:g}" for q in metrics.DEFAULT_PERCENTILES),
    show_default=True,
    help="The latency percentiles the per-point tables report, comma-separated (vllm bench serve's "
    "--metric-percentiles); p50/p90/p99 are always computed.",
)
@click.argument("campaigns", nargs=-1)
@_one_line_errors
def analyze(
    raws: tuple[Path, ...],
    out: Path,
    campaigns: tuple[str, ...],
    no_verify: bool,
    slos: tuple[str, ...],
    percentiles: str,
) -> None:
    """Reconcile theory and measurement: tables, Vega-Lite specs and findings.json per campaign.

    Every run read is verified first (as `collector verify` does); a changed run stops the analysis."""
    slos_ms = slo_lib.parse_slos(list(slos))
    qs = metrics.parse_percentiles(percentiles)
    for line in analyze_fn(
        list(raws), out, list(campaigns) or None, verify=not no_verify, slos_ms=slos_ms, percentiles=qs
    ):
        click.echo(line)


@main.command()
@_raw_roots
@click.option("--ttft-p99-ms", "ttft", type=POSITIVE, required=True, help="p99 TTFT budget, ms.")
@click.option("--itl-p99-ms", "itl", type=POSITIVE, default=None, help="p99 ITL budget, ms (optional).")
@click.option("--engine", type=click.Choice(slo_lib.ENGINES), default=None, help="One engine only.")
@click.option("--campaign", "campaigns", multiple=True, help="One campaign (repeatable); default: all.")
@_one_line_errors
def slo(
    raws: tuple[Path, ...], ttft: float, itl: float | None, engine: str | None, campaigns: tuple[str, ...]
):
    """The SLO planner: per campaign, round and engine, the highest concurrency meeting the p99 budget(s),
    interpolated between measured points, the goodput there and the engine settings that follow; per
    open-loop rate sweep, the highest request rate meeting them."""
    for ans in slo_plan(list(raws), ttft, itl, engine, list(campaigns) or None):
        for line in slo_lib.describe_any(ans):
            click.echo(line)


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
    click.echo(recover_seal(run_dir))


@main.command()
@click.argument("plan_file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@raw_option
@_one_line_errors
def run(plan_file: Path, raw: Path) -> None:
    """Run a measurement plan against a real server and write a sealed run into the raw store.

    Exit status 1 when the run failed (the reason is printed), and when it completed but the analysis' gates
    would exclude every measured point (the first failed check is printed)."""
    result = execute_run(plan_file, raw_root=raw)
    click.echo(str(result))
    why = unusable(result)
    if why:
        raise click.ClickException(f"{result.path}: complete, but unusable: {why}")


# The collector's checks that stand for an analysis gate (analysis.reconcile.gates reads them from
# events.jsonl).
_CHECK_GATES = {**OWN_POINT_CHECKS, "prefix_cache_hits": "prefix_caching_off"}
_STARTUP_GATES = {"prefix_caching_off": "prefix_caching_off"}


def unusable(result: RunResult) -> str | None:
    """Why the gates (``analysis.reconcile.gates.SEVERITY``) would exclude every measured point of a complete
    run — a start-up check that excludes them all, or each non-warmup point failing a check that excludes
    it — with the first such check; None when some point is usable."""
    for c in result.failed_checks:
        if c.point is None and SEVERITY.get(_STARTUP_GATES.get(c.name, ""), "") == "exclude":
            return f"start-up check {c.name} failed: {c.detail}"
    measured = [r.point for r in result.points if r.kind != "warmup"]
    excluding = {}
    for c in result.failed_checks:
        if c.point is not None and SEVERITY.get(_CHECK_GATES.get(c.name, ""), "") == "exclude":
            excluding.setdefault(c.point, c)
    if measured and all(p in excluding for p in measured):
        c = excluding[measured[0]]
        row = next(r for r in result.points if r.point == measured[0])
        cause = f"; first failed request: {row.first_error}" if row.first_error else ""
        return (
            f"every measured point fails a gate that excludes it (first: {c.point}: {c.name}: "
            f"{c.detail}{cause})"
        )
    return None


if __name__ == "__main__":  # pragma: no cover
    main()
