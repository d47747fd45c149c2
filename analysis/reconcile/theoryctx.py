"""The theory a campaign is reconciled against: its model's config and its GPU's datasheet, found from
the campaign's own files (bench `model_id`/`tokenizer_id`, the vLLM engine-config line, the GGUF path in
the llama.cpp log, the GPU name in fingerprint.txt). Formulas stay in ``analysis.core.theory``; this only
picks their inputs and remembers where they came from.

A collector run says more, and is asked first: the model's config.json kept in the run, else the shape
`collector plan` wrote into prediction.json before the first request, else the plan's `model.config`;
per run, the weight format and KV dtype the plan named; the GPU from the fingerprint (nvidia-smi) or the
plan (`cpu` has no datasheet: roofline findings are n/a and say so); and the card's measured ceilings
(ceilings.json) beside the datasheet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from analysis.core import theory
from analysis.core.gpus import GpuSpec, get_gpu
from analysis.core.model_config import ModelConfig, load_model_config, model_config_from_dict
from analysis.loading.campaign import Campaign, RunData
from analysis.loading.rundocs import Ceilings, gpu_name_from_summary
from collector.raw.errors import AnatomyError


@dataclass
class TheoryCtx:
    cfg: ModelConfig | None
    gpu: GpuSpec | None
    model_source: list[str] = field(default_factory=list)
    gpu_source: list[str] = field(default_factory=list)
    weight_formats: dict[str, str] = field(default_factory=dict)  # engine -> weight format ("bf16", "q4_k_m")
    weight_format_source: dict[str, str] = field(default_factory=dict)
    kv_dtypes: dict[str, str] = field(default_factory=dict)  # engine -> KV dtype
    gpu_reason: str | None = None  # why there is no datasheet (e.g. the campaign ran on a CPU)
    model_reason: str | None = None
    ceilings: Ceilings | None = None
    ceilings_source: list[str] = field(default_factory=list)
    # own runs: run name -> (weight format, KV dtype, citation)
    run_formats: dict[str, tuple[str, str, str]] = field(default_factory=dict)

    def weight_format_for(self, run: RunData) -> str | None:
        """The weight format a run served: its plan's (a run of our own), else its engine's in this
        campaign."""
        if run.name in self.run_formats:
            return self.run_formats[run.name][0]
        return self.weight_formats.get(run.engine)

    def weight_bytes_per_step_for_run(self, run_name: str) -> float | None:
        if self.cfg is None or run_name not in self.run_formats:
            return None
        return theory.weight_bytes_read_per_decode_step(self.cfg, self.run_formats[run_name][0])

    def kv_bytes_per_token_for_run(self, run_name: str) -> float | None:
        if self.cfg is None or run_name not in self.run_formats:
            return None
        return theory.kv_bytes_per_token(self.cfg, self.run_formats[run_name][1])

    @property
    def kv_bytes_per_token(self) -> float | None:
        return None if self.cfg is None else theory.kv_bytes_per_token(self.cfg, "bf16")

    def kv_bytes_per_token_for(self, engine: str) -> float | None:
        if self.cfg is None:
            return None
        return theory.kv_bytes_per_token(self.cfg, self.kv_dtypes.get(engine, "bf16"))

    def weight_bytes_per_step(self, engine: str) -> float | None:
        if self.cfg is None or engine not in self.weight_formats:
            return None
        return theory.weight_bytes_read_per_decode_step(self.cfg, self.weight_formats[engine])

    def request_flops(self, input_tokens: int, output_tokens: int) -> float:
        """FLOPs of one request (``theory.request_flops``) for this campaign's model."""
        assert self.cfg is not None
        return float(theory.request_flops(self.cfg, input_tokens, output_tokens))


def _weight_format_from_gguf(path: str) -> str | None:
    m = re.search(r"(?i)(q\d_k_[sml]|q\d_k|q8_0|q4_0|f16|bf16)", path)
    return m.group(1).lower() if m else None


def _dtype_format(dtype: str | None) -> str | None:
    if not dtype:
        return None
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype.lower(), dtype.lower())


def gpu_name_from_fingerprint(fp: object) -> str | None:
    """The GPU name a fingerprint record carries (nvidia-smi's `name` column)."""
    for attr in ("gpu_name",):
        v = getattr(fp, attr, None)
        if v:
            return str(v)
    gpus = getattr(fp, "gpus", None)
    if gpus:
        first = gpus[0]
        name = getattr(first, "name", None) if not isinstance(first, dict) else first.get("name")
        if name:
            return str(name)
    return None


def _own_model(campaign: Campaign) -> tuple[ModelConfig | None, list[str], str | None]:
    """The model's shape from the collector runs' own records (see the module docstring)."""
    reasons = []
    for run in campaign.all_runs:
        d = run.docs
        if d.model_config_file:
            return (
                load_model_config(run.info.path / d.model_config_file),
                [run.cite(d.model_config_file)],
                None,
            )
        pred = d.prediction.prediction if d.prediction else None
        if pred and pred.model_type:
            data = {**pred.config, "model_type": pred.model_type}
            cfg = model_config_from_dict(
                data, name=pred.model or run.name, source=run.info.path / d.files["prediction"]
            )
            return cfg, [run.cite(d.files["prediction"], "prediction.config")], None
        if d.prediction and d.prediction.error:
            reasons.append(f"{run.cite(d.files['prediction'])}: {d.prediction.error}")
        if d.plan is not None:
            try:
                return (
                    load_model_config(d.plan.model.config),
                    [run.cite(d.files["plan"], "model.config")],
                    None,
                )
            except AnatomyError as err:
                reasons.append(f"{run.cite(d.files['plan'])}: model.config: {err}")
    return None, [], "; ".join(reasons) or None


def _own_gpu(campaign: Campaign, ctx: TheoryCtx) -> None:
    """GPU by what nvidia-smi saw (fingerprint/summary.json), else the plan's `model.gpu`."""
    for run in campaign.all_runs:
        d = run.docs
        name = gpu_name_from_summary(d.fingerprint_summary) if d.fingerprint_summary else None
        if name:
            try:
                ctx.gpu = get_gpu(name)
                ctx.gpu_source = [run.cite(d.files["fingerprint_summary"], "gpus.0.name")]
                return
            except AnatomyError:
                ctx.gpu_reason = (
                    f"{run.cite(d.files['fingerprint_summary'])}: GPU {name!r} has no bundled datasheet"
                )
        if d.plan is not None:
            try:
                ctx.gpu = get_gpu(d.plan.model.gpu)
                ctx.gpu_source = [run.cite(d.files["plan"], "model.gpu")]
                if not ctx.gpu.has_datasheet:
                    ctx.gpu_reason = (
                        f"{run.cite(d.files['plan'], 'model.gpu')}: {d.plan.model.gpu!r} has no datasheet "
                        "(a CPU run has no GPU bandwidth or FLOP/s to be a roofline)"
                    )
                return
            except AnatomyError:
                ctx.gpu_reason = (
                    f"{run.cite(d.files['plan'], 'model.gpu')}: {d.plan.model.gpu!r} has no datasheet "
                    "(a CPU run has no GPU bandwidth or FLOP/s to be a roofline)"
                )


def _own_formats(campaign: Campaign, ctx: TheoryCtx) -> None:
    for run in campaign.all_runs:
        plan = run.docs.plan
        if plan is None or not run.points:
            continue
        try:
            fmt = theory.normalise_weight_format(plan.model.weight_format)
        except AnatomyError:
            continue
        kv = plan.model.kv_dtype
        src = run.cite(run.docs.files["plan"], "model.weight_format")
        ctx.run_formats[run.name] = (fmt, kv, src)
        if run.engine and run.engine not in ctx.weight_formats:
            ctx.weight_formats[run.engine] = fmt
            ctx.weight_format_source[run.engine] = src
            ctx.kv_dtypes[run.engine] = kv


def _ceilings(campaign: Campaign, ctx: TheoryCtx) -> None:
    for run in campaign.all_runs:
        if run.docs.ceilings is not None:
            ctx.ceilings = run.docs.ceilings
            ctx.ceilings_source = [run.cite(run.docs.files["ceilings"])]
            return


def build(campaign: Campaign) -> TheoryCtx:
    """The campaign's theory: from the plans our own runs kept, else from what an imported campaign's files
    name (the result files' model id, the fingerprint's GPU, the server logs' weight formats)."""
    if any(r.own for r in campaign.all_runs):
        cfg, src, reason = _own_model(campaign)
        ctx = TheoryCtx(cfg=cfg, gpu=None, model_source=src, model_reason=reason)
        _own_gpu(campaign, ctx)
        _own_formats(campaign, ctx)
        _ceilings(campaign, ctx)
        return ctx
    cfg, model_src = _imported_model(campaign)
    gpu, gpu_src = _imported_gpu(campaign)
    ctx = TheoryCtx(cfg=cfg, gpu=gpu, model_source=model_src, gpu_source=gpu_src)
    for run in campaign.all_runs:
        if run.engine not in ctx.weight_formats:
            _imported_format(run, ctx)
    return ctx


def _imported_model(campaign: Campaign) -> tuple[ModelConfig | None, list[str]]:
    """The bundled config of the first model id (else tokenizer id) a result file names, and its citation;
    a GGUF file name is no model id."""
    for run in campaign.all_runs:
        for p in run.points:
            for name in (p.result.model_id, p.result.tokenizer_id):
                if not name or name.endswith(".gguf"):
                    continue
                try:
                    cfg = load_model_config(name)
                except AnatomyError:
                    continue
                return cfg, [p.cite("model_id" if name == p.result.model_id else "tokenizer_id")]
    return None, []


def _imported_gpu(campaign: Campaign) -> tuple[GpuSpec | None, list[str]]:
    """The datasheet of the first GPU a run's fingerprint names, and its citation."""
    for run in campaign.all_runs:
        rel, fp = run.fingerprint
        name = gpu_name_from_fingerprint(fp) if fp is not None else None
        if rel is None or not name:
            continue
        try:
            gpu = get_gpu(name)
        except AnatomyError:
            continue
        gpus = getattr(fp, "gpus", None)
        return gpu, [run.cite(rel, gpus[0].line if gpus else None)]
    return None, []


def _imported_format(run: RunData, ctx: TheoryCtx) -> None:
    """The weight format (and KV dtype) an imported run's server log states: vLLM's engine config dtype,
    llama.cpp's GGUF file name."""
    rel, log = run.server_log
    if rel is None or log is None:
        return
    if run.engine == "vllm" and getattr(log, "engine_config", None) is not None:
        fmt = _dtype_format(log.engine_config.dtype)
        if fmt:
            ctx.weight_formats["vllm"] = fmt
            ctx.weight_format_source["vllm"] = run.cite(rel, log.engine_config.line)
            kv = log.engine_config.kv_cache_dtype
            ctx.kv_dtypes["vllm"] = "bf16" if kv in (None, "auto") else kv
    elif run.engine == "llamacpp" and getattr(log, "model_path", None):
        fmt = _weight_format_from_gguf(log.model_path)
        if fmt:
            ctx.weight_formats["llamacpp"] = fmt
            ctx.weight_format_source["llamacpp"] = run.cite(rel, log.lines.get("model_path"))
            k = getattr(log, "kv_k_type", None)
            # llama.cpp's default KV type is f16 (same bytes as bf16)
            ctx.kv_dtypes["llamacpp"] = (k or "fp16").lower()
