"""Chinese names and number formatting: the only Python module with CJK text.

Figures take their titles and axis titles from here; the site's templates use the same formatting
helpers (千分位 thousands separators, units, percentage precision) so a number reads the same in a
chart tooltip, a table and the prose.
"""

from __future__ import annotations

import math

# --- units: the unit strings findings carry -> how a Chinese page writes them -------------------------
UNITS: dict[str, str] = {
    "tokens": "token",
    "token/s": "token/s",
    "tokens/s": "token/s",
    "ms": "毫秒",
    "s": "秒",
    "%": "%",
    "GiB": "GiB",
    "GB": "GB",
    "bytes": "字节",
    "bytes/token": "字节/token",
    "bytes/s": "字节/秒",
    "FLOP/s": "FLOP/s",
    "GB/s": "GB/s",
    "FLOPs": "FLOPs",
    "FLOPs/token": "FLOPs/token",
    "GFLOP/token": "GFLOP/token",
    "TFLOP/s": "TFLOP/s",
    "requests": "个请求",
    "count": "个",
    "ratio": "倍",
    "x": "倍",
    "params": "个参数",
    "bool": "",
    "tokens/request": "token/请求",
    "tokens/iteration": "token/迭代",
    "ms/request": "毫秒/请求",
    "runs": "次运行",
    "list": "",
    "": "",
}

STATUS: dict[str, str] = {"ok": "吻合", "mismatch": "不吻合", "n/a": "无数据"}

# reason codes of n/a findings and failed gates -> prose
REASONS: dict[str, str] = {
    "no_sampler_csv": "该轮次此项测试没有采样 CSV（metrics_sweep.csv），无法计算时间窗内的计数器差值",
    "no_server_log": "缺少服务器启动日志，无法读取 KV 池大小",
    "no_kv_pool_line": "服务器日志中没有 KV 池容量行",
    "no_sweep_log": "缺少 sweep 日志，无法核对请求参数（温度、ignore-eos）",
    "no_fingerprint": "该测试目录没有 fingerprint.txt",
    "no_such_test": "该轮次没有这项测试",
    "no_crossing": "在测得的区间内两条曲线没有交叉",
    "no_knee": "所有并发点的 p99 ITL 都未超过 p50 的两倍",
    "single_round": "该批次只有一轮，无法比较轮次间差异",
    "no_concurrency_1": "没有并发数为 1 的测量点",
    "engine_missing": "该轮次缺少另一引擎的数据",
    "no_theory": "理论模块未提供该量",
    "too_few_points": "数据点不足，无法拟合",
    "counter_not_enclosed": "采样没有覆盖该测量点的时间窗",
    "completed_below_requested": "完成的请求少于请求总数",
    "failed_requests": "有失败的请求",
    "output_tokens_short": "输出 token 少于请求值（未遵守 ignore-eos）",
    "temperature_not_zero": "请求未强制温度 0（贪心解码）",
    "prefix_caching_on": "前缀缓存未关闭",
    "preemptions_outside_overload": "非过载测试中出现了抢占",
    "input_tokens_differ": "服务器计数的输入 token 与请求的长度不一致",
    "token_counts_unreliable": "客户端逐块统计的 token 数与服务器的 usage 不一致，ITL/TPOT 不可信",
    "no_prediction": "运行没有可用的预测（prediction.json 为空或缺失）",
    "no_gpu_datasheet": "没有该设备的数据手册（如 CPU），无法给出带宽/算力屋顶线",
    "no_measured_ceiling": "该批次没有实测的带宽/算力上限（ceilings.json）",
    "no_preemption_counter": "该引擎没有抢占计数器：llama.cpp 的槽上下文固定，不会抢占，超出槽的请求被截断",
    "point_cut": "该测量点被中途截断（如设备时限到期），请求没有全部返回，只保留已有数据、不下结论",
    "no_kv_usage_gauge": "该引擎的 /metrics 没有 KV 占用量指标，无法拟合",
    "no_second_format": "同一引擎只有一种权重格式，无法比较量化加速",
    "single_campaign": "只分析了一个批次，无法跨批次比较",
    "not_in_both": "两个批次中只有一个有该系列",
    "unknown": "无法从现有文件判断",
}

# --- column names of the tidy tables -------------------------------------------------------------------
COLUMNS: dict[str, str] = {
    "round": "轮次",
    "engine": "引擎",
    "test": "测试",
    "point": "测量点",
    "concurrency": "并发数",
    "input_len_tokens": "输入长度（token）",
    "output_len_tokens": "输出长度（token）",
    "output_throughput_tokens_per_s": "输出吞吐（token/s）",
    "total_throughput_tokens_per_s": "总吞吐（token/s）",
    "ttft_ms": "首 token 延迟（毫秒）",
    "itl_ms": "token 间延迟（毫秒）",
    "tpot_ms": "每输出 token 时间（毫秒）",
    "e2el_ms": "端到端延迟（毫秒）",
    "percentile": "分位",
    "gate_ok": "通过自检",
    "gate": "自检项",
    "reason": "原因",
    "what": "曲线",
    "basis": "带宽依据",
    "campaign": "批次",
    "series": "系列",
    "predicted": "预测值",
    "measured": "实测值",
    "ratio": "实测 ÷ 预测",
    "weight_format": "权重格式",
}

ENGINES: dict[str, str] = {"vllm": "vLLM（bf16）", "llamacpp": "llama.cpp（Q4_K_M）"}
ROUNDS: dict[str, str] = {"round1": "第一轮", "round2": "第二轮"}
PERCENTILES: dict[str, str] = {"p50": "p50", "p90": "p90", "p99": "p99", "mean": "均值"}
GATE_LEGEND: dict[bool, str] = {True: "通过自检", False: "未通过自检（保留并标出）"}

GATES: dict[str, str] = {
    "completed": "完成数等于请求数",
    "no_failures": "无失败请求",
    "output_tokens": "输出 token 等于请求值",
    "greedy": "温度 0（贪心）",
    "prefix_caching_off": "前缀缓存关闭",
    "no_preemptions": "非过载测试无抢占",
    "fingerprint": "有环境指纹",
    "input_tokens": "输入 token 等于请求值",
    "stream_token_counts": "流式 token 计数与服务器一致",
}

COMPONENTS: dict[str, str] = {
    "embedding": "词嵌入",
    "attention": "注意力",
    "mlp": "MLP",
    "norm": "归一化",
    "lm_head": "输出头（lm_head）",
    "trunk": "主干",
    "attention_kernel": "注意力计算（随长度增长）",
    "weights": "权重矩阵乘",
}

TTFT_PARTS: dict[str, str] = {"queue": "排队", "prefill": "预填充", "remainder": "其余（前端、网络、反分词）"}

# --- figures: title and axis titles (with units) ------------------------------------------------------
FIGURES: dict[str, dict[str, str]] = {
    "structure_params": {"title": "参数量按组件分布", "x": "参数量（十亿）", "y": "组件"},
    "structure_attention_flops": {
        "title": "每 token 计算量随序列长度的变化",
        "x": "序列长度（token）",
        "y": "每 token 计算量（GFLOP）",
        "color": "组成",
    },
    "concurrency_throughput": {
        "title": "吞吐随并发数的变化",
        "x": "并发数",
        "y": "吞吐（token/s）",
        "color": "系列",
    },
    "concurrency_latency": {
        "title": "延迟随并发数的变化",
        "x": "并发数",
        "y": "延迟（毫秒）",
        "color": "分位",
    },
    "concurrency_utilization": {
        "title": "算力与带宽利用率（MFU / MBU）",
        "x": "并发数",
        "y": "利用率（%）",
        "color": "指标",
    },
    "ttft_anatomy": {
        "title": "首 token 延迟拆解",
        "x": "测量点",
        "y": "平均首 token 延迟（毫秒）",
        "color": "组成",
    },
    "kv_fit": {
        "title": "KV 占用与在途 token 的线性关系",
        "x": "在途 token（并发 ×（输入 + 输出））",
        "y": "峰值 KV 占用（token）",
    },
    "overload_timeline": {"title": "过载运行的时间线", "x": "时间（秒）", "y": "数值", "color": "序列"},
    "engines_throughput": {
        "title": "两种引擎的输出吞吐",
        "x": "并发数",
        "y": "输出吞吐（token/s）",
        "color": "系列",
    },
    "engines_itl_roofline": {
        "title": "p50 token 间延迟与带宽下限",
        "x": "并发数",
        "y": "token 间延迟（毫秒）",
        "color": "系列",
    },
    "selection_pareto": {
        "title": "选型：吞吐与 p99 首 token 延迟",
        "x": "p99 首 token 延迟（毫秒）",
        "y": "输出吞吐（token/s）",
        "color": "系列",
    },
    "reproducibility_delta": {
        "title": "两轮之间的吞吐差异",
        "x": "并发数",
        "y": "吞吐差异（%）",
        "color": "引擎",
    },
    "roofline_itl_floor": {
        "title": "实测 p50 token 间延迟与带宽下限（数据手册 / 实测上限）",
        "x": "并发数",
        "y": "token 间延迟（毫秒）",
        "color": "系列",
    },
    "roofline_achievement": {
        "title": "屋顶线达成率",
        "x": "并发数",
        "y": "下限 ÷ 实测（%）",
        "color": "系列",
    },
    "prediction_vs_measured": {
        "title": "测量前的预测与实测之比",
        "x": "实测 ÷ 预测",
        "y": "量",
        "color": "运行",
    },
    "comparison_itl_floor": {
        "title": "跨批次：p50 token 间延迟与带宽下限",
        "x": "并发数",
        "y": "token 间延迟（毫秒）",
        "color": "批次 · 系列",
    },
    "comparison_achievement": {
        "title": "跨批次：屋顶线达成率（数据手册与实测上限）",
        "x": "并发数",
        "y": "下限 ÷ 实测（%）",
        "color": "批次 · 系列",
    },
    "comparison_throughput": {
        "title": "跨批次：输出吞吐随并发数的变化",
        "x": "并发数",
        "y": "输出吞吐（token/s）",
        "color": "批次 · 系列",
    },
}

SERIES: dict[str, str] = {
    "output": "输出吞吐",
    "total": "总吞吐",
    "mfu": "MFU（算力利用率）",
    "mbu": "MBU（带宽利用率）",
    "measured_p50_itl": "实测 p50 ITL",
    "roofline_floor": "带宽下限",
    "kv_usage_pct": "KV 占用（%）",
    "running": "运行中请求",
    "waiting": "等待中请求",
    "preemptions": "累计抢占次数",
    "measured": "实测",
    "fit": "拟合",
    "floor_datasheet": "带宽下限（数据手册）",
    "floor_measured": "带宽下限（实测上限）",
}

# engine names without a weight format (a campaign can run one engine with several formats)
ENGINE_NAMES: dict[str, str] = {"vllm": "vLLM", "llamacpp": "llama.cpp"}
WEIGHT_FORMATS: dict[str, str] = {
    "bf16": "bf16",
    "fp16": "F16",
    "q4_k_m": "Q4_K_M",
    "q8_0": "Q8_0",
    "fp32": "F32",
}

# what a prediction-vs-measured row is about
QUANTITIES: dict[str, str] = {
    "decode_step_ms": "单流解码步长（毫秒）",
    "decode_tokens_per_s_single_stream": "单流解码速度（token/s）",
    "kv_pool_tokens": "KV 池容量（token）",
    "max_concurrency": "最大并发（满长请求）",
    "weight_mib": "权重大小（MiB）",
}


def unit_zh(unit: str) -> str:
    """The Chinese rendering of a finding's unit string (unknown units pass through unchanged)."""
    return UNITS.get(unit, unit)


def fmt_int(n: float | int) -> str:
    """Integer with 千分位 separators: 120064 -> '120,064'."""
    return f"{int(round(n)):,}"


def fmt_num(x: float, digits: int = 2) -> str:
    """Fixed decimals with 千分位 separators: 1404.71, 2 -> '1,404.71'."""
    return f"{x:,.{digits}f}"


def fmt_sig(x: float, sig: int = 3) -> str:
    """About `sig` significant digits, 千分位 for the integer part: 0.01583 -> '0.0158', 6882.6 -> '6,883'."""
    if x == 0 or math.isnan(x):
        return "0" if x == 0 else "—"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, sig - 1 - mag)
    return f"{x:,.{decimals}f}"


def fmt_pct(x: float, digits: int = 1, signed: bool = False) -> str:
    """A percentage already in % units: 12.345 -> '12.3%'; signed adds '+' to positives."""
    s = f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"
    return s + "%"


# Rates written in base units that read better scaled, the way datasheets quote them (decimal prefixes).
SCALED_UNITS: dict[str, tuple[tuple[float, str], ...]] = {
    "bytes/s": ((1e12, "TB/s"), (1e9, "GB/s")),
    "FLOP/s": ((1e12, "TFLOP/s"), (1e9, "GFLOP/s")),
}


def fmt_value(value: object, unit: str) -> str:
    """A finding's value with its unit, the way prose states it."""
    if value is None:
        return STATUS["n/a"]
    if isinstance(value, bool):
        return "是" if value else "否"
    if unit in SCALED_UNITS and isinstance(value, int | float):
        for size, name in SCALED_UNITS[unit]:
            if abs(value) >= size:
                return f"{fmt_sig(value / size, 3)} {name}"
    if isinstance(value, int):
        text = fmt_int(value)
    elif isinstance(value, float):
        text = fmt_pct(value) if unit == "%" else fmt_sig(value, 4)
        if unit == "%":
            return text
    else:
        text = str(value)
    u = unit_zh(unit)
    return f"{text} {u}".strip()
