"""The theory a campaign is reconciled against: its model's config and its GPU's datasheet, found from
the campaign's own files (bench `model_id`/`tokenizer_id`, the vLLM engine-config line, the GGUF path in
the llama.cpp log, the GPU name in fingerprint.txt). Formulas stay in ``analysis.theory``; this only
picks their inputs and remembers where they came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from analysis import theory
from analysis.campaign import Campaign
from analysis.gpus import GpuSpec, get_gpu
from analysis.model_config import ModelConfig, load_model_config
from collector.errors import AnatomyError


@dataclass
class TheoryCtx:
    cfg: ModelConfig | None
    gpu: GpuSpec | None
    model_source: list[str] = field(default_factory=list)
    gpu_source: list[str] = field(default_factory=list)
    weight_formats: dict[str, str] = field(default_factory=dict)  # engine -> weight format ("bf16", "q4_k_m")
    weight_format_source: dict[str, str] = field(default_factory=dict)
    kv_dtypes: dict[str, str] = field(default_factory=dict)  # engine -> KV dtype

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
        """FLOPs of one request, FLOPs: prefill(S) + Σ_{k=1}^{O−1} decode(S + k). The prefill emits the
        first token; each later token is one decode step at context S + k (what vLLM's MFU counter counts:
        it agrees to 0.01 % on the reference campaign at concurrency 1)."""
        assert self.cfg is not None
        s, o = input_tokens, output_tokens
        total = theory.flops_prefill(self.cfg, s)
        for k in range(1, o):
            total += theory.flops_decode_per_token(self.cfg, s + k)
        return float(total)


def _weight_format_from_gguf(path: str) -> str | None:
    m = re.search(r"(?i)(q\d_k_[sml]|q\d_k|q8_0|q4_0|f16|bf16)", path)
    return m.group(1).lower() if m else None


def _dtype_format(dtype: str | None) -> str | None:
    if not dtype:
        return None
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype.lower(), dtype.lower())


def gpu_name_from_fingerprint(fp) -> str | None:
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


def build(campaign: Campaign) -> TheoryCtx:
    cfg = None
    model_src: list[str] = []
    for run in campaign.runs:
        for p in run.points:
            for name in (p.result.model_id, p.result.tokenizer_id):
                if not name or name.endswith(".gguf"):
                    continue
                try:
                    cfg = load_model_config(name)
                except AnatomyError:
                    continue
                model_src = [p.cite("model_id" if name == p.result.model_id else "tokenizer_id")]
                break
            if cfg:
                break
        if cfg:
            break
    gpu = None
    gpu_src: list[str] = []
    for run in campaign.runs:
        rel, fp = run.fingerprint
        name = gpu_name_from_fingerprint(fp) if fp is not None else None
        if name:
            try:
                gpu = get_gpu(name)
            except AnatomyError:
                continue
            gpus = getattr(fp, "gpus", None)
            gpu_src = [run.cite(rel, gpus[0].line if gpus else None)]
            break
    ctx = TheoryCtx(cfg=cfg, gpu=gpu, model_source=model_src, gpu_source=gpu_src)
    for run in campaign.runs:
        rel, log = run.server_log
        if log is None or run.engine in ctx.weight_formats:
            continue
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
    return ctx
