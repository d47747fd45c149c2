"""Chinese labels and number formatting: the one module that names things in Chinese and prints numbers.

Figures take their titles and axis titles from here; the report's templates get the same labels and
formatters as jinja filters and globals (analysis/report/env.py), so a number reads the same in a chart, a
table and the prose. Templates keep the prose; every name of a finding, unit, column, engine, round, gate or
reason comes from here. Formatters take a plain value and return text; a missing value (None, NaN) is an em
dash — a gap shows as a gap, never as 0.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

MISSING = "—"

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
    "ms/token": "毫秒/token",
    "FLOP/byte": "FLOP/字节",
    "MiB": "MiB",
    "tokens/token": "",  # a slope of tokens over tokens is a plain number
    "runs": "次运行",
    "list": "",
    "": "",
}

STATUS: dict[str, str] = {"ok": "吻合", "mismatch": "不吻合", "n/a": "无数据"}

# reason codes of n/a findings and failed gates -> prose
REASONS: dict[str, str] = {
    "no_sampler_csv": (
        "这次运行没有可用的计数器采样（没有采样 CSV 或 /metrics 抓取，或其中没有这项计数器），"
        "无法计算时间窗内的计数器差值"
    ),
    "no_queue_histogram": "llama.cpp 没有排队时间直方图（只有 vLLM 的 /metrics 有）",
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
    "output_tokens_short": "输出 token 少于请求值（提前停止，或槽位上下文写满被截断）",
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
    "no_rows": "没有可画的数据（该节的无数据结论说明原因）",
    "run_unparseable": "该运行的原始文件无法解析（见详情），本批次其余运行照常分析",
    "no_matching_sweep_point": "没有相同并发的扫描测量点可以对照",
    "client_saturated": (
        "压测客户端自身饱和（事件循环滞后 p99 超过 5 毫秒）：这个点的延迟与吞吐由客户端而不是服务器决定；"
        "要测这个点，给客户端更多进程（[load] shards）和核，或把它放到另一台机器上"
    ),
    "no_client_probe": "该运行的采集器还没有记录客户端自检（事件循环滞后），无法判断客户端是否饱和",
    "unknown": "无法从现有文件判断",
}

# --- column names of the tidy tables -------------------------------------------------------------------
COLUMNS: dict[str, str] = {
    "endpoint": "接口",
    "goodput_max_req_s_spread": "最高有效吞吐的离散",
    "gpu_busy_pct_spread": "GPU 忙碌的离散",
    "output_plateau_tok_s": "最高输出（token/秒）",
    "output_plateau_tok_s_spread": "最高输出的离散",
    "p50_itl_at_3_ms": "3 请求/秒时的 p50 ITL（毫秒）",
    "p50_itl_at_3_ms_spread": "p50 ITL 的离散",
    "history": "请求历史",
    "slots": "槽数",
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
    "client_not_saturated": "客户端未饱和（节奏由服务器决定）",
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

# a series' other runs on a campaign figure (a repeat, the arms of a one-knob experiment): grey context
OTHER_RUNS = "同系列的其他运行（重复、单变量实验）"
OTHER_RUNS_OMITTED = "同系列的另外 {n} 个运行（重复、单变量实验）未画出"
# two runs of one series (a repeat of one plan) told apart on a legend by their order
RUN_ORDINAL = "第 {n} 次运行"

# a figure panel per kind of test: points of different tests are never joined into one curve
TEST_KINDS: dict[str, str] = {
    "concurrency_sweep": "并发扫描",
    "engine_comparison": "并发扫描",
    "length_sweep": "长度扫描（固定并发）",
    "overload": "过载",
    "warmup": "预热",
}

# --- figures: title and axis titles (with units) ------------------------------------------------------
FIGURES: dict[str, dict[str, str]] = {
    "structure_params": {"title": "参数量按组件分布", "x": "参数量（十亿）", "y": "组件", "color": "矩阵"},
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
        "color": "系列",
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
    "overload_timeline": {
        "title": "过载运行的时间线",
        "x": "时间（秒）",
        "y_kv_usage_pct": "KV 占用（%）",
        "y_requests": "请求数（个）",
        "y_preemptions": "累计抢占（次）",
        "color": "系列",
    },
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
        "color": "对比",
        "between_rounds": "{a} → {b}",
        "within_round": "{round}内的两次重复",
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
        "x": "实测 ÷ 预测（倍，对数轴）",
        "y": "预测的量",
        "color": "系列",
    },
    "comparison_itl_floor": {
        "title": "跨批次：p50 token 间延迟与带宽下限",
        "x": "并发数",
        "y": "token 间延迟（毫秒）",
        "color": "系列",
    },
    "comparison_achievement": {
        "title": "跨批次：屋顶线达成率（数据手册与实测上限）",
        "x": "并发数",
        "y": "下限 ÷ 实测（%）",
        "color": "系列",
    },
    "comparison_throughput": {
        "title": "跨批次：输出吞吐随并发数的变化",
        "x": "并发数",
        "y": "输出吞吐（token/s）",
        "color": "系列",
        "dash": "GPU",
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
ENGINE_NAMES: dict[str, str] = {"vllm": "vLLM", "llamacpp": "llama.cpp", "openai": "OpenAI 兼容服务"}
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


# what changed between two rounds (reproducibility_changes.what)
CHANGES: dict[str, str] = {
    "kv_pool_tokens": "KV 池 token 数（vLLM 日志）",
    "kv_pool_gib": "KV 池大小（GiB，vLLM 日志）",
    "vllm_non_default_args": "vLLM 的非默认启动参数",
    "driver_version": "GPU 驱动版本",
    "cuda_version": "CUDA 版本",
    "host_mem_total_gib": "主机内存（GiB）",
    "llamacpp_slots": "llama.cpp 槽数（-np）",
    "llamacpp_ctx_per_slot": "llama.cpp 每槽上下文（token）",
    "llamacpp_idle_slot_cache_off": (
        "llama.cpp 日志：空闲槽位的提示缓存被关闭（--cache-idle-slots 需要 --cache-ram）"
    ),
}

# --- findings: (topic, metric) -> what the finding is, in a table row or a sentence -----------------------
# The scope (engine and weight format, run) is added in front by finding_label; rounds head their tables.
FINDINGS: dict[tuple[str | None, str], str] = {
    ("model", "params_total"): "参数总量",
    ("model", "params_per_layer"): "每层参数量",
    ("model", "params_mlp_share_pct"): "MLP 参数占比",
    ("model", "params_embedding_and_lm_head_share_pct"): "词嵌入与输出头参数占比",
    ("model", "flops_per_token_trunk"): "每 token 主干矩阵乘计算量",
    ("model", "flops_per_token_lm_head"): "每 token 输出头计算量",
    ("model", "lm_head_flops_share_pct"): "输出头计算量占比",
    ("model", "attention_overtakes_weights_decode_tokens"): "解码时注意力计算超过权重计算的上下文长度",
    ("model", "attention_overtakes_weights_prefill_tokens"): "预填充时注意力计算超过权重计算的提示长度",
    ("model", "kv_bytes_per_token"): "每 token KV 字节（GQA）",
    ("model", "kv_bytes_per_token_mha"): "每 token KV 字节（若为多头注意力）",
    ("model", "gqa_factor"): "GQA 因子（H ÷ K）",
    ("model", "weight_bytes_bf16"): "权重总字节（bf16）",
    ("model", "weight_bytes_q4_k_m"): "权重总字节（Q4_K_M）",
    ("model", "weight_bytes_read_per_step_bf16"): "每解码步读取的权重（bf16）",
    ("model", "weight_bytes_read_per_step_q4_k_m"): "每解码步读取的权重（Q4_K_M）",
    ("trust", "metrics_bounded_scrapes"): "/metrics 页超出存储上限、只存分析所需指标族的采样次数",
    ("windows", "client_clock_offset_s"): "客户端时钟（结果文件 date 字段）相对 UTC 的偏移",
    ("windows", "max_abs_end_lag_s"): "时间窗结束与采样活动结束的最大偏差",
    ("windows", "order_matches_sweep_log"): "结果文件的时间顺序与 sweep 日志一致",
    (None, "knee_concurrency"): "拐点并发（p99 ITL > 2 × p50）",
    (None, "peak_output_throughput_tokens_per_s"): "最高输出吞吐",
    (None, "single_stream_output_throughput_tokens_per_s"): "单流输出吞吐（并发 1）",
    (None, "single_stream_p50_itl_ms"): "单流 p50 ITL（最低并发的解码步）",
    (None, "max_mfu_pct"): "最高 MFU（算力利用率）",
    (None, "max_mbu_pct"): "最高 MBU（带宽利用率）",
    (None, "flops_per_output_token_gflop"): "每输出 token 计算量（服务器计数器 vs 理论）",
    (None, "tokens_per_iteration_at_max_concurrency"): "最高并发时每次迭代的 token 数",
    (None, "roofline_achievement_pct"): "带宽下限达成率（数据手册带宽）",
    (None, "roofline_achievement_measured_ceiling_pct"): "带宽下限达成率（实测带宽上限）",
    (None, "itl_marginal_ms_per_request"): "每多一个在途请求增加的 ITL（全部点的最小二乘斜率）",
    (None, "workload_shortfall_max_pct"): "输出 token 不足的最大比例",
    (None, "single_stream_step_ratio"): "单流解码步时间比（vLLM p50 ITL ÷ llama.cpp p50 ITL）",
    (None, "kv_pool_gib_log"): "KV 池大小（日志）",
    (None, "kv_pool_tokens_log"): "KV 池 token 数（日志 vs 理论）",
    (None, "kv_pool_tokens_theory"): "KV 池 token 数（理论：池字节 ÷ 每 token KV 字节）",
    (None, "max_concurrency_log"): "满长请求最大并发（日志 vs 理论）",
    (None, "max_concurrency_theory"): "满长请求最大并发（理论）",
    (None, "max_concurrency_theory_half_model_len"): "满长请求最大并发（理论，若 --max-model-len 减半）",
    ("overload", "max_running_requests"): "过载时运行中请求数的最大值（调度器放进的请求）",
    ("engines", "throughput_ratio_at_max_common_concurrency"): "最高共同并发时的吞吐之比（vLLM ÷ llama.cpp）",
    ("selection", "boundary_measured_p99_ttft_ms"): "按实测点，更优引擎发生切换的 p99 TTFT 预算",
    (None, "kv_pool_tokens_log_spread"): "同一轮各次启动的 KV 池差异",
    (None, "kv_pool_tokens_scrape"): "KV 池 token 数（/metrics vs 日志）",
    (None, "kv_fit_slope"): "KV 占用拟合斜率（token / 在途 token）",
    (None, "kv_fit_intercept"): "KV 占用拟合截距",
    (None, "kv_fit_r2"): "KV 占用拟合 R²",
    (None, "capacity_tokens"): "KV 容量（槽数 × 每槽上下文）",
    (None, "kv_cache_mib"): "KV 缓冲区大小（日志 vs -c × 每 token KV 字节）",
    (None, "n_ctx_slot"): "每槽上下文（日志 vs -c ÷ -np）",
    (None, "n_slots"): "槽数（日志 vs -np）",
    (None, "kv_pool_tokens"): "KV 池 token 数（日志 vs 理论）",
    (None, "kv_pool_blocks_metrics"): "KV 块数（/metrics）",
    (None, "block_size_matches_metrics"): "块大小与 /metrics 一致",
    (None, "max_concurrency"): "满长请求最大并发（日志 vs 理论）",
    ("prediction", "decode_step_ms"): "单流解码步：测量前的预测 vs 实测",
    ("prediction", "decode_step_above_floor"): "单流解码步不短于测量前预测的带宽下限",
    ("prediction", "weight_mib"): "权重大小（MiB）：服务器日志 vs 测量前的预测",
    ("prediction", "kv_pool_tokens"): "KV 池容量：测量前的预测 vs 实测",
    ("prediction", "max_concurrency"): "满长请求最大并发：测量前的预测 vs 实测",
    (
        "consistency",
        "max_throughput_duration_error_pct",
    ): "结果文件自洽：吞吐 × 时长 vs token 总数（最大偏差）",
    ("engines", "throughput_crossover_concurrency"): "两引擎吞吐交叉的并发数",
    ("overload", "ttft_queue_share_pct"): "过载时排队占平均 TTFT 的比例",
    ("overload", "oversubscription"): "超订倍数（KV 需求 ÷ 池容量）",
    ("overload", "all_requests_completed"): "发出的请求全部返回",
    ("overload", "truncated_requests"): "输出被截断的请求数（少于请求的输出 token）",
    ("overload", "output_tokens_per_request"): "每个请求平均拿到的输出 token（实测 vs 槽位上下文 − 提示）",
    ("overload", "concurrency_over_slots"): "并发 ÷ 槽数（≤ 1：每个请求立即拿到槽位，无人排队）",
    ("overload", "failed_requests"): "失败请求数",
    ("overload", "completed_requests"): "完成请求数",
    ("overload", "output_tokens_complete"): "每个请求都拿到了请求的输出 token 数",
    ("overload", "preemptions"): "抢占次数",
    ("overload", "mean_running_requests"): "平均运行中请求数（vs 日志最大并发）",
    ("overload", "itl_share_touched_by_preemptions_pct"): "抢占最多能影响的 token 间隔比例",
    ("overload", "tokens_freed_per_preemption"): "每次抢占释放的 KV token 数",
    ("overload", "kv_usage_at_preemption_pct"): "抢占发生时的 KV 占用",
    ("overload", "resident_share_of_log_max_pct"): "过载时平均驻留请求数 ÷ 日志报告的最大并发",
    ("overload", "ttft_ratio_over_sweep"): "过载与同并发扫描点的 p50 TTFT 之比",
    ("overload", "throughput_change_vs_sweep_pct"): "过载相对同并发扫描点的输出吞吐变化",
    ("gates", "points_total"): "测量点总数",
    ("gates", "points_failed"): "未通过自检的测量点",
    ("gates", "points_failed_count"): "未通过自检的测量点数",
    ("gates", "gates_unknown"): "无法判定的自检项",
    ("gates", "all_passed"): "全部测量点通过自检",
    ("gates", "points_flagged"): "标记（保留但需留意）的测量点",
    (
        "gates",
        "output_shortfall_total_pct",
    ): "所有引擎合计：未按请求输出的 token 占请求总量的比例（不含过载测试）",
    ("reproducibility", "repeat_max_abs_throughput_delta_pct"): "同一轮内重复测量的吞吐最大差异",
    ("reproducibility", "max_abs_throughput_delta_pct"): "两轮之间吞吐的最大差异",
    ("reproducibility", "changed_between_rounds"): "两轮之间改变了什么",
    ("selection", "best_under_1000ms_tokens_per_s"): "p99 TTFT ≤ 1 秒时的最高吞吐",
    ("selection", "boundary_p99_ttft_ms"): "更优引擎发生切换的 p99 TTFT 预算",
    ("selection", "best_within_budget_tokens_per_s"): "该 p99 TTFT 预算内最高的输出吞吐（按插值的最高并发）",
    ("selection", "single_stream_advantage"): "单流解码速度的领先倍数（并发 1，慢者 p50 ITL ÷ 快者）",
    ("selection", "peak_throughput_advantage"): "峰值输出吞吐的领先倍数（各自最高点，高者 ÷ 低者）",
    ("ceilings", "copy_bytes_per_s"): "实测上限：设备内拷贝带宽（读 + 写，vs 数据手册显存带宽）",
    ("ceilings", "bf16_matmul_flops_per_s"): "实测上限：bf16 矩阵乘算力（vs 数据手册稠密 bf16 峰值）",
    ("quantization", "step_ratio"): "量化加速：单流解码步时间比（实测 vs 字节之比）",
    (None, "single_stream_speedup"): "单流解码加速比（实测 vs 带宽下限之比）",
    ("concurrency", "throughput_gain_single_to_max"): "输出吞吐：最高并发 ÷ 单流",
    ("concurrency", "knee_p99_itl_ratio"): "拐点处 p99 ITL ÷ 拐点前一档的 p99 ITL",
    ("concurrency", "max_concurrency_tested"): "扫描测到的最高并发",
}
# --- issue #11: the reference study's derivations (structure, memory, length sweep, concurrency, overload)
# ---
MATRICES: dict[str, str] = {
    "q_proj": "q 投影",
    "k_proj": "k 投影",
    "v_proj": "v 投影",
    "o_proj": "o 投影",
    "gate_proj": "gate 投影",
    "up_proj": "up 投影",
    "down_proj": "down 投影",
    "elementwise_rmsnorm": "逐元素：RMSNorm",
    "elementwise_rope": "逐元素：RoPE",
    "elementwise_swiglu": "逐元素：SwiGLU 激活",
    "elementwise_residual": "逐元素：残差加",
    "elementwise_bias": "逐元素：偏置加",
    "elementwise_qk_norm": "逐元素：q/k 归一化",
}
MEMORY_ITEMS: dict[str, str] = {
    "cuda_total": "CUDA 报告的显存总量（vs 数据手册）",
    "budget": "利用率 × 总量（vLLM 的预算）",
    "weights": "权重（日志 vs 理论）",
    "non_torch": "非 torch 内存（CUDA 上下文等）",
    "peak_activation": "激活峰值",
    "kv_pool": "KV 池（日志 vs 账目推算）",
    "cuda_graph": "CUDA 图（在预算之外）",
    "hand_estimate": "手算估计的 KV 池",
    "gap_total_memory": "差额：CUDA 总量低于数据手册（× 利用率）",
    "gap_weights": "差额：实际加载的权重多于理论",
    "gap_non_torch": "差额：非 torch 内存",
    "gap_peak_activation": "差额：激活峰值",
    "gap_reserve": "差额：手算时预留的 1 GiB",
}
FINDINGS.update(
    {
        **{
            ("model", f"flops_per_layer_per_token_{k}"): f"每层每 token 计算量：{v}"
            for k, v in MATRICES.items()
            if not k.startswith("elementwise")
        },
        ("model", "elementwise_flops_per_token"): "每 token 非矩阵乘（逐元素）计算量",
        ("model", "elementwise_flops_share_pct"): "逐元素计算占每 token 计算量的比例",
        ("model", "attention_flops_prefill_causal_1k"): "预填充 1024 token 的注意力计算量（因果掩码减半）",
        ("model", "attention_flops_decode_per_token_1k"): "上下文 1024 时解码一个 token 的注意力计算量",
        ("model", "kv_projection_weight_bytes"): "各层 W_k + W_v 权重字节（bf16）",
        ("model", "kv_outweighs_projections_tokens"): "KV 缓存超过 W_k/W_v 权重所需的缓存 token 数",
        (
            "model",
            "kv_outweighs_projections_concurrency",
        ): "本批次请求形状下 KV 缓存超过 W_k/W_v 权重的并发数",
        ("model", "kv_over_hidden_state_ratio"): "每层每 token 的 K+V 字节 ÷ 隐藏状态字节",
        ("model", "kv_read_share_of_weights_1k_pct"): "上下文 1k 时每步读取的 KV 占权重读取的比例",
        ("model", "kv_read_share_of_weights_8k_pct"): "上下文 8k 时每步读取的 KV 占权重读取的比例",
        ("model", "kv_read_share_of_weights_32k_pct"): "上下文 32k 时每步读取的 KV 占权重读取的比例",
        ("model", "kv_saved_flops_ratio"): "KV 缓存节省的计算：无缓存重算前缀 ÷ 有缓存的一步",
        ("memory", "kv_pool_hand_estimate_gib"): "KV 池手算估计（利用率 × 显存 − 理论权重 − 1 GiB 预留）",
        ("memory", "kv_pool_log_minus_hand_estimate_gib"): "日志中的 KV 池 − 手算估计",
        ("memory", "kv_pool_from_ledger_gib"): "由日志账目推出的 KV 池（vs 日志中的 KV 池）",
        ("memory", "weights_loaded_gib"): "加载的权重（日志 vs 理论）",
        ("memory", "non_torch_gib"): "非 torch 内存",
        ("memory", "peak_activation_gib"): "激活峰值",
        ("memory", "cuda_graph_gib"): "CUDA 图占用（在预算之外）",
        ("memory", "model_buffer_gib"): "模型缓冲区（日志 vs 理论权重字节）",
        ("memory", "gpu_memory_used_mib"): "服务器启动后的显存占用（nvidia-smi，整卡：权重 + KV + 计算缓冲）",
        ("memory", "kv_buffer_gib"): "KV 缓冲区",
        ("memory", "compute_buffer_gib"): "计算缓冲区",
        ("memory", "output_buffer_gib"): "输出缓冲区",
        ("concurrency", "per_slot_efficiency_pct"): "每个槽位保留的单流速度（吞吐增益 ÷ 并发）",
        ("concurrency", "itl_p99_over_p50_max"): "p99 ITL ÷ p50 ITL 的最大值",
        ("concurrency", "decode_share_of_e2e_pct"): "最高并发时解码占端到端延迟的比例",
        ("concurrency", "waiting_queue_peak"): "等待队列的峰值（采样）",
        ("concurrency", "mfu_mbu_crossover_concurrency"): "MFU 超过 MBU 的并发数（插值）",
        ("concurrency", "concurrency_ceiling_at_workload"): "按本次请求形状 KV 池能同时容纳的请求数",
        (
            "concurrency",
            "step_marginal_ms_per_request",
        ): "每多一个在途请求解码步增加的时间（并发 1 → 最高两端的弦斜率，vs 带宽下限）",
        ("overload", "kv_demand_per_request_tokens"): "每个请求的 KV 需求（输入 + 输出，vs 池 / 槽位）",
        ("overload", "p50_ttft_s"): "过载时的 p50 TTFT（秒）",
        ("overload", "p99_ttft_s"): "过载时的 p99 TTFT（秒）",
        ("overload", "ttft_spread_vs_gentlest"): "过载 p50 TTFT ÷ 最轻负载点的 p50 TTFT",
        ("overload", "preemptions_per_minute"): "抢占频率（每分钟）",
        ("overload", "littles_law_waiting"): "平均等待请求数（采样 vs 利特尔定律 λ·W）",
        ("overload", "iteration_tokens_excess_pct"): "迭代 token 计数器超出无重算工作量的比例",
        ("overload", "flops_counter_excess_pct"): "FLOPs 计数器超出无重算理论值的比例",
        (
            "overload",
            "recompute_tokens_implied_by_flops",
        ): "FLOPs 计数器超额所对应的重算 token（vs 抢占次数 × 每次释放的 token）",
        ("engines", "per_slot_decode_tokens_per_s"): "最高并发时每个槽位的解码速度（输出吞吐 ÷ 并发）",
        ("engines", "throughput_dips"): "吞吐低于更低并发邻点的测量点（未解释的异常）",
        ("ttft", "prefill_growth_single_to_max"): "每请求平均预填充时间：最高并发 ÷ 并发 1",
        ("ttft", "queue_share_of_prefill_pct"): "最高并发时平均排队时间 ÷ 平均预填充时间",
        ("ttft", "kv_pool_blocks"): "KV 池的块数（16 token 一块）",
        (
            "length",
            "mfu_one_axis_max_deviation_pct",
        ): "同样每迭代 token 数下，长度扫描与并发扫描的算力之差（最大）",
        ("length", "kv_bytes_per_input_token"): "长度扫描：每多一个输入 token 的峰值 KV 字节（该并发下）",
        ("length", "kv_bytes_per_token_from_itl_slope"): "由 ITL 随上下文的斜率 × 带宽反推的每 token KV 字节",
        ("length", "prefill_ms_per_input_token"): "预填充：每个输入 token 的时间（斜率）",
        ("length", "step_growth_ratio"): "最长与最短输入的解码步（p50 ITL）之比",
        ("length", "tokens_per_iteration_at_longest_input"): "最长输入时每次迭代的 token 数",
        ("length", "mfu_mbu_crossover_input_tokens"): "MFU 超过 MBU 的输入长度（插值）",
        ("length", "arithmetic_intensity_at_longest_input"): "最长输入时的算术强度（FLOPs ÷ 读取字节）",
        ("length", "chunked_prefill_budget_tokens"): "每次迭代的 token 上限（分块预填充预算）",
        (
            "length",
            "budget_prediction_single_stream",
        ): "预测（检查前写下）：并发 1 时迭代数 = 完成数 ×（⌈提示 ÷ 预算⌉ + 输出 − 1）",
    }
)
REASONS.update(
    {
        "no_flops_counter": (
            "没有 FLOPs / 读取字节计数器（只有 vLLM 在 --enable-mfu-metrics 时提供），无法计算 MFU / MBU"
        ),
        "no_memory_line": (
            "服务器日志中没有显存账目行（vLLM 的 'Free memory on device …' 或 llama.cpp 的 'buffer size'）"
        ),
        "no_per_iteration_records": (
            "需要逐次迭代的调度记录（每一步调度了哪些请求、预填充还是解码）；采样只有每秒的累计和"
            "（排队/预填充直方图、迭代 token 总数），分不出单次迭代里的构成"
        ),
        "prefix_cache_not_logged": "服务器日志没有写前缀缓存的设置（llama.cpp 的启动日志不打印它）",
    }
)
FINDINGS.update(
    {
        ("ttft", "mixed_batch_prefill_decode_ratio"): "混合批次：单次迭代里预填充 token ÷ 解码 token",
        ("length", "ttft_stolen_steps_split"): "首 token 延迟拆成“被别人的解码步占去的时间”与自己的预填充",
    }
)

# Where the same metric means something else at one level or for one engine.
FINDINGS_AT_LEVEL: dict[tuple[str | None, str, str], str] = {
    (
        "reproducibility",
        "max_abs_throughput_delta_pct",
        "campaign",
    ): "两轮之间吞吐的最大差异（两个引擎中较大者）",
}
FINDINGS_FOR_ENGINE: dict[tuple[str | None, str, str], str] = {
    # llama.cpp: a slot, not a shared pool
    ("overload", "oversubscription", "llamacpp"): "超订倍数（单个请求的上下文需求 ÷ 单个槽位上下文）",
    ("overload", "mean_running_requests", "llamacpp"): "平均运行中请求数（vs 槽数）",
    ("overload", "preemptions", "llamacpp"): "抢占次数（llama.cpp 不抢占）",
}
FINDINGS_CROSS: dict[tuple[str | None, str], str] = {
    (None, "single_stream_p50_itl_ms"): "单流 p50 ITL（解码步）",
    (None, "knee_concurrency"): "拐点并发",
    (None, "capacity_tokens"): "KV 容量（实测 vs 理论）",
}

# --- issue #15: controlled experiments (analysis/reconcile/experiments/) ------------------------------------
EXPERIMENT_NAMES: dict[str, str] = {
    "slots": "槽位配置（-np 64 vs 256）",
    "sampling": "采样放到 GPU 上（--backend-sampling）",
    "graphs": "CUDA 图开 vs 关",
    "kv_quant": "KV 缓存量化（f16 / q8_0 / q4_0）",
    "kv_pool": "KV 池大小（vLLM --num-gpu-blocks-override）",
    "model_size": "模型大小",
    "two_gpus": "两块 GPU",
    "speculative_decoding": "投机解码",
    "chunked_prefill": "分块预填充调参",
}
EXPERIMENT_VARIANTS: dict[str, str] = {
    "np256": "-np 256（每槽 6,144）",
    "np64": "-np 64（每槽 4,096）",
    "sampling_cpu": "CPU 采样",
    "sampling_gpu": "GPU 采样（-bs）",
    "graphs_on": "CUDA 图开",
    "graphs_off": "CUDA 图关",
    "kv_f16": "KV f16",
    "kv_q8_0": "KV q8_0",
    "kv_q4_0": "KV q4_0",
    "pool_32": "32 块",
    "pool_48": "48 块",
    "pool_64": "64 块",
    "pool_65": "65 块",
}
VERDICTS: dict[str, str] = {"confirmed": "成立", "refuted": "被推翻", "inconclusive": "无法判定"}
PREDICTION_KINDS: dict[str, str] = {"bound": "界限", "point": "数值", "exact": "精确"}
REASONS.update(
    {
        "exp_runs_missing": "该实验的对照组运行不全（少于两组），无法比较",
        "exp_not_run_two_gpus": "需要同一台主机上的两块 H200，这个批次只有一块",
        "exp_random_weights_acceptance": "随机权重下草稿模型的接受率没有意义，测了也不能代表真实模型",
        "exp_vllm_gpu_out_of_reach": "分块预填充是 vLLM 的参数，而这里够不到 GPU 上的 vLLM",
    }
)
FINDINGS.update(
    {
        **{
            (f"exp_{e}", "arms_match_plans"): "每组运行的 plan.toml 都写明了该组的旋钮取值"
            for e in ("slots", "sampling", "graphs", "kv_quant", "kv_pool")
        },
        ("exp_model_size", "arms_match_plans"): "每组运行的 plan.toml 都写明了该组的模型配置与权重格式",
        (
            "exp_slots",
            "cells_scanned_model",
        ): "预测（格子扫描模型）：-np 64 比 -np 256 每步少 15.7 毫秒，各并发皆然",
        (
            "exp_slots",
            "np64_not_slower",
        ): "预测：-np 64 不慢于 -np 256，快不超过 10%（并发 ≤ 8）/ 20%（16–64）",
        (
            "exp_slots",
            "np64_c64_far_from_4090",
        ): "预测：-np 64 在并发 64 时 p50 ITL 仍 ≥ 60 毫秒（离 4090 的 35 毫秒很远）",
        ("exp_slots", "kv_buffer_mib"): "KV 缓冲区（日志 vs -c × 每 token KV 字节）",
        ("exp_slots", "ctx_per_slot_tokens"): "每槽上下文（日志 vs -c ÷ -np）",
        ("exp_slots", "c32_p50_itl_delta_pct"): "并发 32：-np 64 相对 -np 256 的 p50 ITL 变化",
        ("exp_sampling", "c1_itl_drop"): "预测：并发 1 时 p50 ITL 少 1 毫秒",
        ("exp_sampling", "c64_itl_bound"): "预测：并发 64 时 p50 ITL ≤ 15 毫秒",
        ("exp_sampling", "c64_throughput_bound"): "预测：并发 64 时输出吞吐 ≥ 3,000 token/s",
        ("exp_sampling", "slope_bound"): "预测：每多一路请求 ITL 增加 ≤ 0.15 毫秒",
        (
            "exp_sampling",
            "sampling_is_per_slot_cost",
        ): "预测（方向）：采样是每槽成本的主因，并发 64 时 p50 ITL 降到 60 毫秒以下",
        ("exp_sampling", "itl_slope_ms_per_stream"): "每多一路请求 p50 ITL 增加的时间（并发 8–64 拟合）",
        ("exp_sampling", "per_stream_cost_removed_pct"): "GPU 采样去掉的每路成本占比（1 − 斜率之比）",
        ("exp_sampling", "c64_p50_itl_delta_pct"): "并发 64：GPU 采样相对 CPU 采样的 p50 ITL 变化",
        ("exp_graphs", "c1_launch_cost"): "预测：关掉 CUDA 图后并发 1 的 p50 ITL 多 0.5–1.5 毫秒",
        ("exp_graphs", "high_c_unchanged"): "预测：并发 16–64 时关掉 CUDA 图变化在 ±5% 以内",
        (
            "exp_graphs",
            "graphs_reused_zero_blocks",
        ): "'graphs reused' 为 0 的计时块数（llama.cpp 自身的图复用计数）",
        ("exp_graphs", "c1_p50_itl_delta_pct"): "并发 1：CUDA 图关相对开的 p50 ITL 变化",
        ("exp_graphs", "c32_p50_itl_delta_pct"): "并发 32：CUDA 图关相对开的 p50 ITL 变化",
        ("exp_kv_quant", "itl_change_from_ledger"): "预测（字节账目）：量化 KV 相对 f16 的 p50 ITL 变化",
        ("exp_kv_quant", "slower_than_f16"): "预测（备择）：量化 KV 的注意力核不受带宽限制，反而比 f16 慢",
        ("exp_kv_quant", "kv_buffer_mib"): "KV 缓冲区（日志 vs -c × 按块格式算的每 token KV 字节）",
        ("exp_kv_quant", "ctx_per_slot_tokens"): "每槽上下文（日志 vs -c ÷ -np）",
        ("exp_kv_quant", "kv_bytes_per_token"): "每 token KV 字节（按块格式）",
        ("exp_kv_quant", "capacity_tokens_at_budget"): "固定 84 GiB KV 预算能装的 token 数",
        ("exp_kv_quant", "f16_itl_growth_8k_to_16k_pct"): "f16 KV：并发 8 时输入 8k → 16k 的 p50 ITL 变化",
        ("exp_kv_quant", "c8_16k_p50_itl_delta_pct"): "并发 8、输入 16k：量化 KV 相对 f16 的 p50 ITL 变化",
        ("exp_kv_pool", "preemptions"): "抢占次数（计数器 vs 同步一波的预测）",
        ("exp_kv_pool", "stop_tokens"): "被抢占的流停在第几个输出 token（实测 vs 预测）",
        ("exp_kv_pool", "residents_at_peak"): "波峰时驻留的请求数（实测 vs ⌊(N − 1) ÷ 每请求块数⌋）",
        ("exp_kv_pool", "log_max_concurrency"): "日志的最大并发（vs 池 token ÷ 每请求 token）",
        ("exp_kv_pool", "max_running"): "运行中请求数的最大值（每个请求都以提示长度被放进）",
        ("exp_kv_pool", "max_repeat_spread_pct_throughput"): "重复测量的吞吐差异（同一池大小跑两次）",
        ("exp_graphs", "max_repeat_spread_pct_itl"): "重复测量的最大差异（p50 ITL，各并发点中最大者）",
        ("exp_model_size", "linear_fit_r2"): "预测：每种格式 ITL 对每步字节是一条直线（R² ≥ 0.98）",
        ("exp_model_size", "fixed_cost_in_range"): "预测：固定成本 a 在 2–3.5 毫秒之间",
        ("exp_model_size", "bw_eff_in_range"): "预测：F16 的有效带宽在 3.0–4.8 TB/s 之间",
        ("exp_model_size", "achievement_below_15_at_0_5b"): "预测：0.5B 达到带宽下限的比例 < 15%",
        ("exp_model_size", "achievement_above_65_at_14b"): "预测：14B F16 达到带宽下限的比例 > 65%",
        ("exp_model_size", "q4_fixed_cost_not_lower"): "预测：Q4_K_M 的固定成本 a 不低于 F16（差值 ≥ 0）",
        (
            "exp_model_size",
            "q4_cost_per_byte_not_lower",
        ): "预测：Q4_K_M 每字节的时间（1/有效带宽）不低于 F16（差值 ≥ 0）",
        (
            "exp_model_size",
            "fixed_cost_per_layer",
        ): "备择：固定成本按层计，残差随层数走（3B、14B 在线上方，7B 在下方）",
        ("exp_model_size", "achievement_pct"): "达到带宽下限的比例（下限 ÷ p50 ITL）",
        ("exp_model_size", "p50_itl_ms"): "并发 1 的 p50 ITL（重复取平均，旁为计划的预测）",
        ("exp_model_size", "fit_intercept_ms"): "拟合的固定成本 a（ITL = a + 字节 ÷ 有效带宽）",
        ("exp_model_size", "fit_bw_eff_tb_per_s"): "拟合的有效带宽（1 ÷ 斜率）",
        ("exp_model_size", "crossover_gb"): "交叉点：每步字节 ÷ 有效带宽 = a 时的每步字节",
        ("exp_model_size", "layer_fit_ms_per_layer"): "加层数项的拟合：每层的固定成本",
        ("exp_model_size", "cross_lease_7b_spread_pct"): "7B 并发 1 的 p50 ITL 跨租期离散（各次运行）",
        **{("experiments", k): f"实验：{v}" for k, v in EXPERIMENT_NAMES.items()},
    }
)
FIGURES.update(
    {
        "experiment_slots": {
            "title": "槽位配置：p50 token 间延迟随并发数的变化",
            "x": "并发数",
            "y": "p50 token 间延迟（毫秒）",
            "color": "槽位",
            "dash": "重复",
            "repeat": "第 {k} 次",
            "panel": "{v}",
        },
        "experiment_sampling": {
            "title": "采样在 CPU 还是 GPU：p50 token 间延迟随并发数的变化",
            "x": "并发数",
            "y": "p50 token 间延迟（毫秒）",
            "color": "采样",
            "dash": "重复",
            "repeat": "第 {k} 次",
            "panel": "{v}",
        },
        "experiment_graphs": {
            "title": "CUDA 图开与关：p50 token 间延迟",
            "x": "并发数",
            "y": "p50 token 间延迟（毫秒）",
            "color": "CUDA 图",
            "dash": "重复",
            "repeat": "第 {k} 次",
            "panel": "{v}",
        },
        "experiment_kv_pool": {
            "title": "KV 池大小：抢占与驻留请求随 KV 需求 ÷ 池的变化",
            "x": "KV 需求 ÷ 池（倍）",
            "y_preemptions": "抢占次数（次）",
            "y_residents": "请求数（个）",
            "color": "曲线",
            "predicted": "预测（同步一波）",
            "measured": "实测",
            "log": "日志的最大并发",
        },
        "experiment_model_size": {
            "title": "模型大小：单流解码的步时与带宽下限",
            "x_bytes": "每步读取的权重（GB）",
            "y_itl": "p50 token 间延迟（毫秒）",
            "x_params": "参数量（十亿，对数）",
            "y_achievement": "达到带宽下限的比例（%）",
            "color": "权重格式",
            "measured": "实测（重复取平均）",
            "fit": "拟合 a + 字节 ÷ 有效带宽",
            "floor": "带宽下限",
            "line": "曲线",
        },
        "experiment_kv_quant": {
            "title": "KV 缓存量化：长上下文下的 p50 token 间延迟",
            "x": "输入长度（token）",
            "y": "p50 token 间延迟（毫秒）",
            "color": "KV 类型",
            "dash": "重复",
            "repeat": "第 {k} 次",
            "panel": "并发 {v}",
        },
    }
)


# navigation sections the renderer adds around the pages
NAV: dict[str, str] = {
    "structure": "模型结构",
    "method": "方法",
    "data": "原始数据",
    "comparison": "跨批次对比",
    "differences": "与参考研究不同之处",
}


# --- labels -------------------------------------------------------------------------------------------


def round_label(r: str | None) -> str:
    return ROUNDS.get(r or "", r or "")


def engine_name(engine: str | None) -> str:
    """The engine alone: ``llama.cpp``."""
    return ENGINE_NAMES.get(engine or "", engine or "")


def format_label(fmt: str | None) -> str:
    return WEIGHT_FORMATS.get(fmt or "", (fmt or MISSING).upper())


def series_label(engine: str | None, weight_format: str | None = None) -> str:
    """An engine with its weight format, ``llama.cpp（Q4_K_M）``; the engine alone when the format is
    unknown."""
    if weight_format:
        return f"{engine_name(engine)}（{format_label(weight_format)}）"
    return engine_name(engine)


def metric_label(finding: Any) -> str | None:
    """What a finding is, without its scope; None when this module has no name for it."""
    topic, metric = finding.topic, finding.metric
    if finding.engine and (topic, metric, finding.engine) in FINDINGS_FOR_ENGINE:
        return FINDINGS_FOR_ENGINE[(topic, metric, finding.engine)]
    if (topic, metric, finding.level) in FINDINGS_AT_LEVEL:
        return FINDINGS_AT_LEVEL[(topic, metric, finding.level)]
    if getattr(finding.at, "cross", False) and (topic, metric) in FINDINGS_CROSS:
        return FINDINGS_CROSS[(topic, metric)]
    return FINDINGS.get((topic, metric))


def finding_label(finding: Any, scope: bool = True) -> str:
    """A finding's Chinese name from its fields: ``llama.cpp（Q4_K_M） · 拐点并发（p99 ITL > 2 × p50）``.

    ``scope`` puts the series (engine and weight format) in front of findings about one engine, run or series.
    A metric this module has no name for shows as its code name (the page still shows the finding; the site
    test fails on it, so it gets a name before it is published).
    """
    name = metric_label(finding) or f"`{finding.metric}`"
    if finding.formats:
        name += "（" + " ÷ ".join(format_label(f) for f in finding.formats) + "）"
    if finding.test:
        name += f"（测试 `{finding.test}`）"
    # a finding about one engine, one run or one series names it; so does a round's finding that rests on one
    # run (a round's overload point, the pool of its first vLLM log)
    if scope and finding.engine and (finding.level != "campaign" or finding.run):
        return f"{series_label(finding.engine, finding.weight_format)} · {name}"
    return name


def column_label(column: str, table: str | None = None) -> str | None:
    """A table column's header: the table's own label where its column means something else than the name
    does elsewhere (TABLE_COLUMNS), else the column's one label (COLUMNS); None where neither has one."""
    return TABLE_COLUMNS.get(table or "", {}).get(column) or COLUMNS.get(column)


def unit_zh(unit: str) -> str:
    """The Chinese rendering of a finding's unit string (unknown units pass through unchanged)."""
    return UNITS.get(unit, unit)


def reason_text(code: str | None) -> str:
    return REASONS.get(code or "", code or "")


def status_text(status: str) -> str:
    return STATUS.get(status, status)


# --- numbers ------------------------------------------------------------------------------------------


def _is_missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def sig_decimals(x: float, sig: int = 3) -> int:
    """Decimals that keep ``sig`` significant digits for |x| < 10**sig, none for larger numbers."""
    if x == 0 or not math.isfinite(x):
        return 0
    return max(0, sig - 1 - math.floor(math.log10(abs(x))))


def fmt_num(x: object, decimals: int | None = None, sig: int = 3) -> str:
    """千分位, about ``sig`` significant digits: ``12345.6`` → ``12,346``, ``0.01234`` → ``0.0123``;
    integers (and integral floats) print exactly: ``120064`` → ``120,064``."""
    if _is_missing(x):
        return MISSING
    if isinstance(x, bool):
        return "✓" if x else "✗"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, list | tuple):  # e.g. the output tokens where each preempted stream stopped
        return "、".join(fmt_num(v, decimals, sig) for v in x) if x else MISSING
    if not isinstance(x, Real):
        return str(x)
    x = float(x)
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if decimals is None:
        decimals = sig_decimals(x, sig)
    text = f"{x:,.{decimals}f}"
    if text.startswith("-") and float(text.replace(",", "")) == 0:
        text = text[1:]  # "-0.0" reads like a sign that means something
    return text


def fmt_int(x: object) -> str:
    """Rounded to a whole number, 千分位: ``120064.4`` → ``120,064``."""
    if _is_missing(x) or not isinstance(x, Real):
        return MISSING if _is_missing(x) else str(x)
    return f"{round(float(x)):,}"


def fmt_approx(x: object, sig: int = 2) -> str:
    """A large count a sentence gives as 约: rounded to ``sig`` significant digits, ``262_999`` →
    ``260,000``."""
    if _is_missing(x) or not isinstance(x, Real) or isinstance(x, bool) or not x:
        return fmt_num(x)
    v = float(x)
    return fmt_num(int(round(v, sig - 1 - math.floor(math.log10(abs(v))))))


def fmt_times(x: object) -> str:
    """A headline ratio at the precision a reader needs: from 10 up whole (``22.44`` → ``22``, ``214.9`` →
    ``215``), below 10 one decimal (``6.62`` → ``6.6``, ``2.710`` → ``2.7``); evidence rows keep their
    digits."""
    if _is_missing(x) or not isinstance(x, Real) or isinstance(x, bool):
        return fmt_num(x)
    v = float(x)
    return fmt_num(v, 0 if abs(v) >= 10 else 1)


def fmt_ms_as_s(ms: object, sig: int = 3) -> str:
    """A duration given in ms, printed in seconds with its unit: ``168_900`` → ``169 秒``; ``sig``
    significant digits (a headline's boundary reads ``0.73 秒`` at ``sig=2``)."""
    if _is_missing(ms) or not isinstance(ms, Real) or isinstance(ms, bool):
        return MISSING
    return f"{fmt_num(float(ms) / 1000, sig=sig)} 秒"


# Below this many percent a value is float rounding of an exact agreement (4.640 GiB against 4.640 GiB read as
# "+0.000000000000038%"), never a measured share: the smallest real share the pages show, a norm's parameters
# in a 0.5B model, is ~1e-4 %.
PCT_NOISE = 1e-9


def fmt_pct(x: object, decimals: int | None = None) -> str:
    """A value already in percent: ``12.345`` → ``12.3%``; below 1 % two significant digits
    (``0.0145`` → ``0.015%``: a small share must not read as 0)."""
    if _is_missing(x) or not isinstance(x, Real):
        return MISSING if _is_missing(x) else str(x)
    v = float(x)
    if abs(v) < PCT_NOISE:
        v = 0.0
    if decimals is None:
        decimals = 1 if abs(v) >= 1 or v == 0 else sig_decimals(v, 2)
    return f"{fmt_num(v, decimals)}%"


def fmt_signed_pct(x: object, decimals: int | None = None) -> str:
    """An error or a change in percent, always with its sign: ``+1.2%``, ``−0.40%``."""
    if _is_missing(x) or not isinstance(x, Real):
        return MISSING if _is_missing(x) else str(x)
    v = float(x)
    text = fmt_pct(abs(v), decimals)
    if text.strip("0.%") == "":
        return text
    return ("+" if v > 0 else "−") + text


def fmt_fraction_pct(x: object, decimals: int | None = None) -> str:
    """A 0–1 fraction shown in percent: ``0.9123`` → ``91.2%``."""
    if _is_missing(x) or not isinstance(x, Real):
        return MISSING if _is_missing(x) else str(x)
    return fmt_pct(float(x) * 100.0, decimals)


_BINARY = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def fmt_bytes(n: object) -> str:
    """``15231233024`` → ``14.19 GiB`` (binary units, as GPU memory is reported)."""
    if _is_missing(n) or not isinstance(n, Real):
        return MISSING if _is_missing(n) else str(n)
    v = float(n)
    for unit, size in _BINARY:
        if abs(v) >= size:
            return f"{fmt_num(v / size, sig=4 if abs(v) / size < 1000 else 3)} {unit}"
    return f"{fmt_int(v)} B"


# Rates written in base units that read better scaled, the way datasheets quote them (decimal prefixes).
SCALED_UNITS: dict[str, tuple[tuple[float, str], ...]] = {
    "bytes/s": ((1e12, "TB/s"), (1e9, "GB/s")),
    "FLOP/s": ((1e12, "TFLOP/s"), (1e9, "GFLOP/s")),
}
# A finding's value keeps four significant digits (a table cell three): it is the number the page states.
VALUE_SIG = 4


def list_item(item: object) -> str:
    """One element of a list-valued finding: a gate or a change by its name, anything else as code."""
    if isinstance(item, str):
        if item in GATES:
            return GATES[item]
        if item in CHANGES:
            return CHANGES[item]
        return f"`{item}`"
    return fmt_num(item)


def fmt_value(value: object, unit: str | None = None) -> str:
    """A finding's value (or theory) with its unit, the way prose states it: ``120,064 token``, ``0.015%``,
    ``4.26 TB/s``, ``是``; a missing value is an em dash. No unit for a dimensionless number (R²)."""
    unit = unit or ""
    if _is_missing(value):
        return MISSING
    if isinstance(value, bool):
        return "是" if value else "否"
    if isinstance(value, list | tuple):
        return "、".join(list_item(v) for v in value) if value else "无"
    if not isinstance(value, Real):
        return str(value)
    if unit == "%":
        return fmt_pct(value)
    if unit == "fraction":  # a share 0..1 (a cache hit rate) reads as a percentage
        return fmt_pct(100 * value)
    if unit in SCALED_UNITS:
        for size, name in SCALED_UNITS[unit]:
            if abs(float(value)) >= size:
                return f"{fmt_num(float(value) / size, sig=3)} {name}"
    text = fmt_num(value, sig=VALUE_SIG)
    u = unit_zh(unit)
    return f"{text} {u}".strip()


# --- a finding, formatted (the template filters) ----------------------------------------------------------


def value_text(finding: Any) -> str:
    """The measured value with its unit; an n/a finding says 无数据."""
    if not finding.available:
        return STATUS["n/a"]
    return fmt_value(finding.value, finding.unit)


def theory_text(finding: Any) -> str:
    return MISSING if finding.theory is None else fmt_value(finding.theory, finding.unit)


def error_text(finding: Any) -> str:
    return fmt_signed_pct(finding.error_pct)


def tolerance_text(finding: Any) -> str:
    return MISSING if finding.tolerance_pct is None else "±" + fmt_pct(finding.tolerance_pct)


# --- table cells ------------------------------------------------------------------------------------------


def cell_text(column: str, value: Any) -> str:
    """A table cell by the unit its column name carries (units live in names: ``ttft_ms``)."""
    if isinstance(value, str):
        by_column = {
            "round": ROUNDS,
            "engine": ENGINES,
            "part": {**COMPONENTS, **TTFT_PARTS},
            "group": COMPONENTS,
            "gate": GATES,
            "quantity": QUANTITIES,
            "reason": REASONS,
            "what": CHANGES,
            "weight_format": WEIGHT_FORMATS,
            "matrix": MATRICES,
            "item": MEMORY_ITEMS,
            "verdict": VERDICTS,
            "variant": EXPERIMENT_VARIANTS,
            "versus_variant": EXPERIMENT_VARIANTS,
            "experiment": EXPERIMENT_NAMES,
        }.get(column)
        if by_column is not None:
            return by_column.get(value, value)
        return value
    if value is None or isinstance(value, bool):
        return fmt_num(value)
    c = column.lower()
    if c.endswith("_pct") or c.endswith("_percent"):
        return fmt_signed_pct(value) if ("error" in c or "delta" in c) else fmt_pct(value)
    if c.endswith("_fraction") or c in ("kv_usage", "mfu", "mbu"):
        return fmt_fraction_pct(value)
    if c.endswith("_bytes_per_s"):
        return fmt_num(value / 1e9) + " GB/s"  # datasheet bandwidth is decimal GB/s
    if ("bytes" in c and not c.endswith("_per_token")) or c.endswith("_size"):
        return fmt_bytes(value)
    if isinstance(value, float) and value.is_integer() and abs(value) >= 1000:
        return fmt_int(value)  # a whole number that lost its int type in the CSV (small ones may be versions)
    return fmt_num(value)


# issue #14: goodput and the SLO planner
REASONS.update(
    {
        "no_request_records": "没有逐请求记录（requests.jsonl）：基准文件只有分位数，"
        "看不出哪些请求同时满足全部 "
        "SLO，由分位数推出的不是逐请求的有效吞吐（goodput）",
        "slo_not_bracketed": (
            "测得的点没有把延迟预算夹在中间（最高的实测并发或请求速率仍满足，或没有一个点满足），无法插值"
        ),
    }
)
UNITS["req/s"] = "请求/秒"
FINDINGS.update(
    {
        ("slo", "slo_concurrency"): "满足延迟预算的最高并发（对数插值）",
        ("slo", "slo_request_throughput_req_s"): "该并发下的请求吞吐（插值）",
        ("slo", "slo_goodput_req_s"): "有效吞吐 goodput（满足全部 SLO 的请求/秒，下方夹点实测）",
        ("slo", "slo_request_rate_req_s"): "满足延迟预算的最高请求速率（开环扫描，对数插值）",
        ("goodput", "goodput_req_s"): "有效吞吐 goodput（满足全部 SLO 的请求/秒）",
        ("goodput", "goodput_max_req_s"): "并发扫描中最高的有效吞吐 goodput",
    }
)


# analysis.reconcile.prefix_cache
REASONS.update(
    {
        "prefix_cache_not_exposed": "该引擎或该次运行没有给出前缀缓存计数（/metrics 和请求 timings 都没有）",
        "prefix_cache_no_lookups": "该测量点期间没有任何提示词 token 查询过前缀缓存",
        "prefix_cache_imported": "导入的结果文件没有测量点起止时刻的 /metrics 抓取，读不到前缀缓存计数",
        "prefix_cache_no_points": "本批次自己的运行只有预热点，没有正式测量点",
    }
)
FINDINGS.update({("prefix_cache", "prefix_cache_hit_rate"): "前缀缓存命中率（缓存命中 token ÷ 查询 token）"})

# issue #14: rate sweeps (analysis.reconcile.rates, charts.rate_*, campaign/rates.md.j2)
FIGURES.update(
    {
        "rate_throughput": {
            "title": "吞吐随提供的请求速率的变化",
            "x": "提供的请求速率（请求/秒）",
            "y_rate": "实际完成速率（请求/秒）",
            "y_tok": "输出吞吐（token/秒）",
            "y_goodput": "有效吞吐 goodput（请求/秒）",
            "color": "系列",
            "diag": "完成速率 = 提供速率",
        },
        "rate_latency": {
            "title": "延迟分位数随提供的请求速率的变化",
            "x": "提供的请求速率（请求/秒）",
            "y_ttft": "首 token 延迟 TTFT（毫秒）",
            "y_itl": "token 间延迟 ITL（毫秒）",
            "y_e2e": "端到端延迟 E2E（毫秒）",
            "color": "系列",
            "dash": "分位数",
        },
    }
)
FINDINGS.update(
    {
        ("rate", "saturation_rate_req_s"): "饱和点：实际完成速率落后提供速率超过阈值的第一个速率",
        ("rate", "max_achieved_rate_req_s"): "最高实际完成速率",
        ("rate", "goodput_max_req_s"): "最高有效吞吐 goodput（逐请求满足全部 SLO）",
        ("rate", "achieved_rate_req_s"): "实际完成速率（vs 该点调度提供的速率）",
        ("rate", "send_lateness_p99_ms"): "客户端发送迟到的 p99（实际发送 − 计划发送）",
        ("rate", "goodput_req_s"): "有效吞吐 goodput（逐请求满足全部 SLO）",
    }
)
REASONS.update(
    {
        "not_saturated": "每个提供的速率下，实际完成速率都跟上了（落后不超过阈值）：扫描没有到达饱和点",
    }
)

# issue #22: the reference study's claims in its own words (analysis/reconcile/point_details, capacity_arith,
# length_costs, overload_cadence, workload_totals) and its ledger (analysis/report/reference_claims)
FINDINGS.update(
    {
        (
            "telemetry",
            "power_share_of_board_power_at_max_concurrency_pct",
        ): "最高并发时 GPU 功耗中位数占板卡功耗上限（数据手册）的比例",
        ("telemetry", "temp_c_max"): "扫描全程最高 GPU 温度",
        ("telemetry", "gpu_memory_used_gib"): "启动后 nvidia-smi 显存占用（vs 权重 + 全部槽位 KV）",
        ("telemetry", "kv_pool_over_vllm"): "KV 容量（token 格数）是同轮 vLLM 池的倍数",
        ("concurrency", "mean_running_at_max_concurrency"): "最高并发时实际运行中请求数（均值）",
        ("concurrency", "median_running_at_max_concurrency"): "最高并发时实际运行中请求数（中位数）",
        ("concurrency", "waiting_nonzero_share_at_max_concurrency_pct"): "最高并发时等待队列非空的采样点占比",
        (
            "concurrency",
            "mean_kv_usage_at_max_concurrency_pct",
        ): "最高并发时 KV 池平均占用（vs 运行数 × 平均上下文 ÷ 池）",
        (
            "concurrency",
            "marginal_throughput_last_step_tokens_per_s",
        ): "最后一档每新增一个并发槽多换来的输出吞吐",
        (
            "concurrency",
            "step_growth_single_to_max_pct",
        ): "解码步长从单流到最高并发的增幅（p50 ITL；附带宽下限的增幅）",
        (None, "kv_pool_tokens_mha"): "同样的池若是 MHA（KV 头数 = 注意力头数）能装的 token",
        (None, "max_input_len_mha_at_length_sweep"): "MHA 池在长度扫描的并发与输出下允许的最长输入",
        (None, "max_num_seqs_demand_over_pool"): "--max-num-seqs 条请求在并发扫描负载下的 KV 需求 ÷ 池",
        (None, "kv_cache_memory_suggested_gib"): "vLLM 日志建议的占满显存的 --kv-cache-memory",
        (None, "kv_pool_change_over_previous_round_pct"): "KV 池相对上一轮的变化",
        ("length", "capacity_at_longest_input"): "最长输入时池能容纳的请求数（池 ÷ (输入 + 输出)）",
        ("length", "prefill_wall_ms_per_input_token_longest"): "最长输入时每个输入 token 的预填充墙钟时间",
        ("length", "output_throughput_change_pct"): "输出吞吐从最短到最长输入的变化",
        ("length", "total_throughput_change_pct"): "总吞吐（输入 + 输出）从最短到最长输入的变化",
        ("length", "p50_ttft_growth"): "p50 TTFT 从最短到最长输入的倍数",
        ("length", "p99_ttft_growth"): "p99 TTFT 从最短到最长输入的倍数",
        ("length", "ttft_compute_share_at_longest_input_pct"): "最长输入时平均 TTFT 中纯预填充计算的占比",
        ("overload", "kv_demand_per_request_gib"): "一个满上下文请求的 KV",
        ("overload", "kv_demand_total_gib"): "全部并发请求的 KV 需求（vs 池）",
        ("overload", "preemption_interval_s"): "抢占的平均间隔（第一次到最后一次）",
        (
            "overload",
            "decode_time_stolen_share_pct",
        ): "解码阶段中不属于自身典型步长的时间占比（被他人预填充、重算与暂停占去）",
        ("overload", "peak_kv_usage_pct"): "过载期间 KV 池最高占用",
        ("overload", "kv_usage_at_least_90_share_pct"): "过载期间 KV 占用 ≥ 90% 的采样点占比",
        ("overload", "kv_usage_at_least_95_share_pct"): "过载期间 KV 占用 ≥ 95% 的采样点占比",
        (
            "gates",
            "output_tokens_shortfall_total_pct",
        ): "全部测量点合计少拿的输出 token（vs 请求数 × 请求输出长度）",
        ("inventory", "requests_total"): "全部测量点发出的请求数（不含预热）",
        ("reproducibility", "p99_ttft_delta_min_pct"): "两轮同一并发点 p99 TTFT 差异的下限",
        ("reproducibility", "p99_ttft_delta_max_pct"): "两轮同一并发点 p99 TTFT 差异的上限",
        ("reproducibility", "repeat_p99_ttft_delta_min_pct"): "同轮两次扫描同一并发点 p99 TTFT 差异的下限",
        ("reproducibility", "repeat_p99_ttft_delta_max_pct"): "同轮两次扫描同一并发点 p99 TTFT 差异的上限",
        ("model", "params_decoder_layers_share_pct"): "全部解码层参数占模型参数的比例",
        ("model", "flops_per_layer_per_token"): "一层的矩阵乘 FLOPs（每 token）",
        (None, "kv_demand_at_max_concurrency_pct"): "并发扫描最高并发的 KV 需求（请求最长时）占池的比例",
        (None, "kv_at_max_concurrency_over_kv_projections"): "最高并发时的 KV 是 K/V 投影权重的倍数",
        (
            "length",
            "output_throughput_sweep_top_over_longest_input",
        ): "并发扫描最高点与最长输入的输出吞吐之比（KV 占用相近）",
        ("length", "per_second_mfu_max_pct"): "长度扫描中最高一秒的 MFU（按秒的 FLOPs 计数器）",
        ("length", "prefill_seconds_tflops_p50"): "预填充秒（≥ 一半峰值）的 FLOP/s 中位数",
        ("length", "decode_seconds_mfu_p50_pct"): "纯解码秒（< 四分之一峰值）的 MFU 中位数",
    }
)
# issue #22, the claims left open by the first pass (analysis/reconcile/length_counters and the modules above)
FINDINGS.update(
    {
        ("length", "mbu_one_axis_max_deviation_pct"): "按每次迭代 token 对齐两条轴：MBU 最大相对偏差",
        (
            "length",
            "read_model_deviation_shortest_pct",
        ): "二项读取模型（权重 + 运行数 × 上下文 × KV）vs 字节计数器：最短输入",
        (
            "length",
            "read_model_deviation_longest_pct",
        ): "二项读取模型（权重 + 运行数 × 上下文 × KV）vs 字节计数器：最长输入",
        (
            "length",
            "flops_per_token_slope_gflop_per_context_token",
        ): "每个迭代 token 的 FLOPs 随上下文的斜率（长度扫描各点拟合；截距与 R² 见来源）",
        ("length", "decode_step_intensity_longest_flop_per_byte"): "最长输入时一个解码步的算术强度（理论）",
        ("length", "p99_itl_at_smaller_budget_ms"): "分块预算降到四分之一时预计的 p99 ITL（预测，未测）",
        (
            "length",
            "input_equals_output_throughput_at_input_tokens",
        ): "输入吞吐等于输出吞吐时的输入长度（每请求平均输出）",
        ("length", "kv_sawtooth_period_s"): "最长输入时 KV 占用锯齿的周期（自相关）",
        ("length", "kv_sawtooth_swing_pp"): "最长输入时 KV 占用锯齿每个周期的谷峰差",
        ("length", "kv_demand_at_double_longest_input_pct"): "输入加倍到最长输入两倍时的 KV 需求占池的比例",
        ("overload", "sampler_samples"): "过载窗口内的 1 Hz 采样点数",
        ("overload", "iterations_at_p50_step_s"): "过载窗口内全部迭代按 p50 步长计的墙钟时间",
        ("overload", "recompute_wall_share_pct"): "重算被抢占请求占全程墙钟的比例（抢占数 × 平均预填充时间）",
        ("concurrency", "sweep_sampler_span_s"): "并发扫描全程的采样时长",
        ("concurrency", "sweep_iterations"): "并发扫描全程的迭代次数（迭代 token 直方图计数）",
        ("telemetry", "kv_cells_gib"): "llama.cpp 全部槽位 KV 格子的显存（格数 × 每 token KV）",
        (
            "telemetry",
            "ctx_needed_for_sweep_tokens",
        ): "llama.cpp 跑自己的扫描所需的 -c（最高并发 ×（输入 + 输出））",
        (
            "ttft",
            "block_rounding_tokens_per_request",
        ): "每个请求最后一个 KV 块空出的 token（块数 × 16 − 上下文）",
    }
)
COLUMNS.update(
    {
        "running_mean": "运行中请求（均值）",
        "running_p50": "运行中请求（中位数）",
        "waiting_max": "等待请求（峰值）",
        "waiting_nonzero_share_pct": "等待非空的采样占比",
        "kv_usage_mean_pct": "KV 占用（均值）",
        "power_w_p50": "功耗中位数（W）",
        "power_w_mean": "功耗均值（W）",
        "power_w_max": "功耗峰值（W）",
        "temp_c_mean": "温度均值（°C）",
        "temp_c_max": "温度峰值（°C）",
        "stall_share_pct": "等待他人预填充（均值 TPOT ÷ p50 ITL − 1）",
        "throughput_gain_over_single": "吞吐 ÷ 单流",
        "duration_per_batch_s": "每批耗时（总耗时 ÷ 批数，秒）",
        "read_gb_per_iteration": "每次迭代读取（GB，计数器）",
    }
)
# the tables' other columns, one label per column name (ordered by the page that first shows one)
COLUMNS.update(
    {
        # campaigns/cpu-tiny-qwen2/concurrency.md
        "decode_share_pct": "解码占端到端",
        "floor_ms": "带宽下限（毫秒）",
        "max_waiting": "等待队列峰值",
        "mbu_pct": "MBU",
        "mfu_pct": "MFU",
        "p99_itl_ms": "p99 ITL（毫秒）",
        "p99_over_p50_itl": "p99 ÷ p50",
        "waiting_drain_s": "清空用时（秒）",
        "metric": "指标",
        "p50_ms": "p50（毫秒）",
        "p90_ms": "p90（毫秒）",
        "p95_ms": "p95（毫秒）",
        "p99.9_ms": "p99.9（毫秒）",
        "p99_ms": "p99（毫秒）",
        "duration_s": "时长（秒）",
        "mean_itl_ms": "ITL 均值（毫秒）",
        "mean_tpot_ms": "TPOT 均值（毫秒）",
        "mean_ttft_ms": "平均 TTFT（毫秒）",
        "p50_e2el_ms": "p50 E2E（毫秒）",
        "p90_itl_ms": "p90 ITL（毫秒）",
        "server_token_ms": "服务器自报每 token 时间（毫秒）",
        # campaigns/cpu-tiny-qwen2/engines.md
        "bandwidth_bytes_per_s": "数据手册带宽（字节/秒）",
        "kv_bytes_per_token": "每 token KV（字节）",
        "weight_bytes_per_step": "每步读取的权重",
        "weight_floor_ms": "权重读取下限（毫秒）",
        "roofline_achievement_pct": "下限达成率",
        "roofline_floor_ms": "带宽下限（毫秒）",
        "workload_shortfall_pct": "输出不足",
        # campaigns/cpu-tiny-qwen2/experiments.md
        "demand_over_pool": "需求 ÷ 池",
        "first_stop_s": "首次抢占（点开始后，秒）",
        "log_max_concurrency": "日志最大并发",
        "max_running": "最多运行中",
        "n_blocks": "块数",
        "preemptions": "抢占次数",
        "preemptions_predicted": "预测抢占次数",
        "residents": "实测驻留",
        "residents_predicted": "预测驻留",
        "stop_tokens": "被抢占的流停在第几个 token",
        "expected_value": "应有取值",
        "definition_source": "定义来源",
        "experiment": "实验",
        "knob": "设置",
        "knob_value": "计划中的取值",
        "repeat": "第几次",
        # campaigns/cpu-tiny-qwen2/index.md
        "completed": "完成",
        "failed": "失败",
        "num_prompts": "请求数",
        "requested_output_len_tokens": "请求输出长度（token）",
        # campaigns/cpu-tiny-qwen2/kv.md
        "block_size": "块大小（token）",
        "blocks_metrics": "块数（/metrics）",
        "blocks_theory": "块数（理论）",
        "capacity_tokens": "KV 容量（token）",
        "kv_cache_mib_log": "KV 缓冲区 MiB（日志）",
        "kv_cache_mib_theory": "KV 缓冲区 MiB（理论）",
        "kv_pool_tokens_log": "池 token 数（日志）",
        "kv_pool_tokens_theory": "池 token 数（理论）",
        "max_concurrency_log": "最大并发（日志）",
        "max_concurrency_theory": "最大并发（理论）",
        "n_ctx_slot_log": "每槽上下文（日志）",
        "n_ctx_slot_theory": "每槽上下文（理论）",
        "n_slots_log": "槽数（日志）",
        "run": "运行",
        "measured_peak_kv_usage_pct": "实测峰值占用",
        "predicted_peak_kv_usage_pct": "预测峰值占用",
        # campaigns/cpu-tiny-qwen2/lengths.md
        "arithmetic_intensity_flop_per_byte": "算术强度（FLOP/字节）",
        "mean_context_tokens": "平均上下文（token）",
        "mean_prefill_ms": "平均预填充（毫秒）",
        "peak_kv_usage_fraction": "峰值 KV 占用",
        "tokens_per_iteration": "每次迭代 token",
        # campaigns/cpu-tiny-qwen2/overload.md
        "kv_usage_after_pct": "之后 KV 占用",
        "kv_usage_before_pct": "之前 KV 占用",
        "t_s": "时刻（秒）",
        "tokens_freed_per_preemption": "每次释放（token）",
        "mean_output_tokens_per_request": "平均输出 token",
        # campaigns/cpu-tiny-qwen2/rates.md
        "arrival": "到达分布",
        "lateness_p50_ms": "迟到 p50（毫秒）",
        "lateness_p99_ms": "迟到 p99（毫秒）",
        "offered_rate_req_s": "调度提供（请求/秒）",
        "p99_e2el_ms": "p99 E2E（毫秒）",
        "shortfall_pct": "落后（%）",
        # campaigns/cpu-tiny-qwen2/selection.md
        "p99_ttft_budget_ms": "p99 TTFT 预算（毫秒）",
        # campaigns/cpu-tiny-qwen2/slo.md
        "bracketing": "夹点",
        "request_throughput_req_s": "请求吞吐（请求/秒）",
        # campaigns/cpu-tiny-qwen2/ttft.md
        "ms": "平均时间（毫秒）",
        "part": "组成",
        # campaigns/h200-qwen2.5-7b-random/experiments.md
        "kv_buffer_mib_log": "日志（MiB）",
        "kv_buffer_mib_theory": "预测（MiB）",
        "kv_type": "KV 类型",
        "n_ctx_tokens": "-c（token）",
        "baseline": "对照组 p50 ITL（毫秒）",
        "delta_pct": "差异",
        "distinguishable": "可区分",
        "spread_borrowed": "离散借自重复组",
        "spread_pct": "重复离散",
        "treatment": "实验组 p50 ITL（毫秒）",
        "variant": "组",
        "versus_variant": "对照组",
        "arm": "组",
        "predicted_value": "账目预测（毫秒）",
        "spread": "离散",
        "verdict": "判定",
        "intercept_ms": "截距 a（毫秒）",
        "r2": "R²",
        "slope_ms_per_stream": "斜率（毫秒/路）",
        "busy_slot_runs": "连续编号段数",
        "slot_id_max": "最大槽号",
        "slot_id_min": "最小槽号",
        "bw_eff_hi_tb_per_s": "上界",
        "bw_eff_lo_tb_per_s": "下界",
        "bw_eff_tb_per_s": "有效带宽（TB/s）",
        "crossover_between": "交叉点落在",
        "crossover_gb": "交叉点（GB/步）",
        "intercept_hi_ms": "a 上界",
        "intercept_lo_ms": "a 下界",
        "layer_fit_ms_per_layer": "每层成本（毫秒）",
        "layer_fit_r2": "加层数项 R²",
        "achievement_pct": "达到下限",
        "itl_minus_predicted_ms": "实测 − 预测（毫秒）",
        "layers": "层数",
        "predicted_itl_ms": "计划预测（毫秒）",
        "residual_ms": "拟合残差（毫秒）",
        "size": "大小",
        "spread_ms": "重复离散（毫秒）",
        "step_from_smaller_ms": "比上一档多（毫秒）",
        "step_spread_ms": "其离散（毫秒）",
        "weight_gb_per_step": "每步权重（GB）",
        # campaigns/h200-qwen2.5-7b-random/ladder.md
        "achieved_rate_req_s": "实际完成速率（请求/秒）",
        "good_requests": "达标",
        "goodput_req_s": "有效吞吐（请求/秒）",
        "output_throughput_tok_s": "输出吞吐（token/秒）",
        "p50_ttft_ms": "p50 TTFT（毫秒）",
        "p99_ttft_ms": "p99 TTFT（毫秒）",
        "request_rate_req_s": "提供速率（请求/秒）",
        "requests": "请求",
        "plan": "出处",
        "predicted_hi": "上限",
        "predicted_lo": "下限",
        "quantity": "预测的量",
        "good_share_at_unheld": "第一个守不住的速率下达标占比",
        "goodput_max_req_s": "最高有效吞吐（请求/秒）",
        "goodput_spread_req_s": "重复离散",
        "gpu_busy_pct": "饱和时 GPU 忙碌",
        "held_rate_req_s": "守住的速率",
        "runs": "运行次数",
        "saturation_req_s": "饱和速率（落后 > 10%）",
        "step_ratio": "本步倍数",
        "step_spread_pct": "离散",
        "break_even_alpha_kernels": "不亏的 α（算子）",
        "break_even_alpha_server": "不亏的 α（服务器）",
        "k": "k",
        "speedup_kernels_a0.6": "α 0.6 算子",
        "speedup_kernels_a0.8": "α 0.8 算子",
        "speedup_kernels_a0.9": "α 0.9 算子",
        "speedup_kernels_a0.95": "α 0.95 算子",
        "speedup_server_a0.6": "α 0.6 服务器",
        "speedup_server_a0.8": "α 0.8 服务器",
        "speedup_server_a0.9": "α 0.9 服务器",
        "speedup_server_a0.95": "α 0.95 服务器",
        "acceptance": "接受率",
        "p50_tpot_c1_ms": "单流 p50 TPOT（毫秒）",
        "speedup_kernels": "算子预计",
        "step_kernels_ms": "算子一步（毫秒）",
        "step_server_ms": "服务器一步（毫秒）",
        "synthetic_alpha": "合成 α",
        "tokens_per_step": "每步 token",
        # campaigns/rtx4090-qwen2.5-7b/kv.md
        "fit_tokens": "拟合值（token）",
        "peak_kv_usage_tokens": "峰值 KV 占用（token）",
        "tokens_in_flight": "在途 token",
        "kv_pool_gib_log": "池大小（GiB，日志）",
        # campaigns/rtx4090-qwen2.5-7b/reproducibility.md
        "a_output_throughput_tokens_per_s": "前者吞吐（token/s）",
        "b_output_throughput_tokens_per_s": "后者吞吐（token/s）",
        "comparison": "比较",
        "p50_itl_delta_pct": "p50 ITL 差异",
        "changed": "是否改变",
        # comparison.md
        "a": "批次 A",
        "achievement_datasheet_pct_a": "A 达成率",
        "achievement_datasheet_pct_b": "B 达成率",
        "b": "批次 B",
        "series_key": "系列",
        "speedup_measured": "实测加速比",
        "speedup_theory_datasheet": "预测（数据手册带宽之比）",
        "speedup_theory_measured_ceilings": "预测（实测带宽之比）",
        "error_pct": "误差",
        "heavier_format": "较重格式",
        "lighter_format": "较轻格式",
        "status": "结果",
        "theory": "字节之比",
        "value": "实测步长之比",
        "achievement_datasheet_pct": "达成率（数据手册）",
        "achievement_measured_pct": "达成率（实测上限）",
        "floor_datasheet_ms": "下限（数据手册，毫秒）",
        "floor_measured_ms": "下限（实测上限，毫秒）",
        "p50_itl_ms": "p50 ITL（毫秒）",
        "bandwidth_datasheet_bytes_per_s": "数据手册带宽",
        "bandwidth_measured_bytes_per_s": "实测带宽上限",
        "capacity_tokens_theory": "容量（理论）",
        "gpu_display": "设备",
        "knee_concurrency": "拐点并发",
        "max_concurrency_measured": "测到的最高并发",
        "peak_concurrency": "最高吞吐时的并发",
        "peak_output_throughput_tokens_per_s": "峰值输出吞吐（token/s）",
        "single_stream_concurrency": "并发",
        "single_stream_p50_itl_ms": "实测 p50 ITL（毫秒）",
        # structure/cpu-tiny-qwen2.md
        "gib": "GiB",
        "item": "项目",
        "theory_gib": "理论 / 推算（GiB）",
        "flops_per_token": "每层每 token FLOPs",
        "matrix": "矩阵 / 运算",
        "share_of_layer_pct": "占一层矩阵乘的比例",
        "component": "组件",
        "group": "类别",
        "params": "参数量",
        "params_per_layer": "每层参数量",
        "share_pct": "占比",
        "weight_bytes": "权重总字节",
        "weight_bytes_read_per_step": "每个解码步读取",
    }
)
# where one table's column means something else than the name does elsewhere (a round, not a campaign; a
# difference, not a value): that table's label
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "reproducibility_changes": {"a": "第一轮", "b": "第二轮", "what": "项目"},
    "comparison_pairs": {"speedup_measured": "实测加速比（A 步长 ÷ B 步长）"},
    "experiment_diffs": {"variant": "实验组"},
    "experiment_predictions": {"arm": "运行", "measured": "实测差（毫秒）", "spread": "离散（毫秒）"},
    "reproducibility": {"delta_pct": "吞吐差异"},
    "selection_guide": {"p99_ttft_ms": "该点 p99 TTFT（毫秒）"},
}
# words for a table column's coded values (a template's relabel=): one set per kind of value
VALUE_LABELS: dict[str, dict[Any, str]] = {
    "latency_metric": {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"},
    "marked": {True: "是", False: ""},
    "budget": {"none": "不限", None: "不限"},
    "gate_status": {"pass": "通过", "fail": "**未通过**", "unknown": "无法判断"},
    "arrival": {"poisson": "泊松", "gamma": "gamma", "constant": "等间隔"},
    "gate_pass": {True: "通过", False: "未通过"},
    "distinguishable": {True: "可区分", False: "不可区分"},
    "yes_no": {True: "是", False: "否"},
    "model_size": {"0.5b": "0.5B", "1.5b": "1.5B", "3b": "3B", "7b": "7B", "14b": "14B"},
    "reconcile_status": {"ok": "吻合", "mismatch": "**不吻合**", "n/a": "无数据"},
}
# why a claim of the reference study has no number here (the ledger's n/a lines)
REFERENCE_NA_REASONS: dict[str, str] = {
    "seed_head_log": (
        "我们导入的参考数据只有这份服务端日志的启动部分（*.head.log 摘录），结论要用的逐请求日志行不在其中"
    ),
    "seed_no_round1_sampler": "第一轮这项测试的 1 Hz 采样 CSV 不在我们导入的参考数据里",
    "reference_no_llamacpp_sampler": (
        "参考研究没有对 llama.cpp 做 1 Hz 采样（原文自述），这项随时间变化的数据不存在"
    ),
    "model_config_absent": "仓库里没有这个模型的 config.json（analysis/core/models/），无法按结构推算",
    "reference_not_saved": "参考研究自己没有保存这份输出（原文自述），这项证据已不存在",
    "other_model_no_campaign": (
        "这条结论关于另一个模型：本站只为批次实测的模型生成结构页；它的配置在仓库里，"
        "`collector plan --model Qwen3-30B-A3B` 给出同一笔账"
    ),
}
REFERENCE_STATUSES: dict[str, str] = {
    "shown": "已展示",
    "corrected": "已更正",
    "na": "无法复现",
    "todo": "尚未核对",
}
# issue #26: the deployment ladder and speculative decoding (analysis/reconcile/ladder.py, speculative.py)
VERDICTS.update(
    {
        "paid": "划算（超出离散）",
        "cost": "亏了（超出离散）",
        "within_spread": "在离散之内",
        "capped": "被速率档封顶",
    }
)
LADDER_ARMS: dict[str, str] = {
    "ladder-0-baseline": "0 默认配置",
    "ladder-1-gpusampling": "1 + GPU 采样（-bs）",
    "ladder-2-slots": "2 + 槽位按容量定为 64（-np 64）",
    "ladder-3-f16": "3 + 权重换 F16",
    "ladder-4-prefixcache": "4 + 前缀缓存",
    "ladder-5-batch": "5 + -b 256 -ub 256",
    "ladder-0-completions": "0 默认配置，改用补全接口",
}
ENDPOINTS_ZH: dict[str, str] = {
    "chat": "聊天接口（/v1/chat/completions）",
    "completions": "补全接口（/v1/completions）",
}
SLOT_HISTORIES: dict[str, str] = {
    "fresh": "新启动（只跑过预热）",
    "sweep": "跑过并发 1、4、8、16 之后",
    "after": "紧接着再一波",
}
FINDINGS.update(
    {
        ("ladder", "goodput_max_req_s"): "最高有效吞吐（各速率点取最大，重复取平均）",
        ("ladder", "held_rate_req_s"): "守住 SLO 的最高提供速率（≥ 90% 请求达标）",
        ("ladder", "gpu_busy_pct"): "饱和时 GPU 忙碌比例（nvidia-smi utilization.gpu，6 请求/秒及以上）",
        ("ladder", "goodput_step_ratio"): "这一步的有效吞吐倍数（本组 ÷ 上一组）",
        ("ladder", "ladder_total_ratio"): "从默认到最后一步的有效吞吐倍数",
        ("speculative", "target_step_1_ms"): "目标模型（7B F16）一步一个 token 的时间",
        ("speculative", "target_step_2_over_1"): "目标模型一步两个 token ÷ 一步一个 token",
        ("speculative", "draft_step_1_ms"): "草稿模型（0.5B F16）一步一个 token 的时间",
        ("speculative", "speedup_measured"): "实测加速比（无草稿的 p50 TPOT ÷ 本组 p50 TPOT，单流）",
        ("speculative", "gpu_busy_pct"): "GPU 忙碌比例（补全接口，闭环并发 1 与 4）",
        ("speculative", "server_overhead_ms"): "服务器每个投机步比算子时间多出的开销",
        ("speculative", "break_even_alpha_kernels"): "不亏的最低接受率（只算算子时间）",
        ("speculative", "break_even_alpha_server"): "不亏的最低接受率（按服务器实测的每步开销）",
        **{
            ("ladder_endpoint", f"{m}{sfx}"): w + (" ÷ 聊天接口" if sfx else "（补全接口）")
            for m, w in {
                "goodput_max_req_s": "最高有效吞吐",
                "gpu_busy_pct": "饱和时 GPU 忙碌比例",
                "output_plateau_tok_s": "各速率中最高的输出 token/秒",
                "p50_itl_at_3_ms": "3 请求/秒时的 p50 ITL",
            }.items()
            for sfx in ("", "_ratio")
        },
        (
            "ladder_endpoint",
            "chat_endpoint_caps",
        ): "聊天接口的逐 token 主机开销是否封顶了服务器（补全接口须同时提高 GPU 忙碌与有效吞吐）",
        **{
            ("slot_history", f"{q}_{h}"): f"-np 64 相对 -np 256 的{w}差异（并发 32，{hz}）"
            for q, w in {"p50_itl_diff_pct": " p50 ITL ", "throughput_diff_pct": "输出吞吐"}.items()
            for h, hz in SLOT_HISTORIES.items()
        },
        **{
            ("slot_history", f"p50_itl_diff_pct_slot_runs_{n}"): f"忙槽编号断成 {n} 段的那些波：p50 ITL 差异"
            for n in range(1, 9)
        },
        ("slot_history", "slowdown_rises_with_slot_runs"): "段数每多一段，p50 ITL 差异都更大",
    }
)
_PREDICTED_QUANTITIES = {
    "goodput_max_req_s": "最高有效吞吐",
    "goodput_step_ratio": "这一步的有效吞吐倍数",
    "saturation_req_s": "饱和速率",
    "speedup_c1": "单流加速比",
    "acceptance": "接受率",
}
_RATIO_AT = {"p50_ttft": "p50 TTFT", "p99_ttft": "p99 TTFT", "p50_itl": "p50 ITL", "p99_itl": "p99 ITL"}
FINDINGS.update(
    {
        **{("ladder", f"predicted_{q}"): f"预测：{w}" for q, w in _PREDICTED_QUANTITIES.items()},
        **{
            ("ladder", f"predicted_{m}_ratio_at_{r}"): f"预测：{w} 在 {r} 请求/秒时 ÷ 上一组"
            for m, w in _RATIO_AT.items()
            for r in (3, 6, 10, 15)
        },
        **{("speculative", f"predicted_{q}"): f"预测：{w}" for q, w in _PREDICTED_QUANTITIES.items()},
        ("ladder_endpoint", "predicted_goodput_max_req_s"): "预测：补全接口的最高有效吞吐",
        ("ladder_endpoint", "predicted_gpu_busy_pct"): "预测：补全接口饱和时的 GPU 忙碌比例",
        ("ladder_endpoint", "predicted_p50_itl_ratio_vs_chat_at_3"): "预测：3 请求/秒时 p50 ITL，补全 ÷ 聊天",
        **{
            ("slot_history", f"predicted_{q}_{h}"): f"预测：-np 64 相对 -np 256 的{w}差异（{hz}）"
            for q, w in {"p50_itl_diff_pct": " p50 ITL ", "throughput_diff_pct": "输出吞吐"}.items()
            for h, hz in SLOT_HISTORIES.items()
        },
    }
)

# The home page's 「没测的」: what each kind of missing data is, naming the file (the key is the n/a finding's
# reason; the order is the list's).
MISSING_DATA: dict[str, str] = {
    "no_sampler_csv": "没有采样 CSV（`metrics_sweep.csv`）：KV 占用、排队、计数器都没有逐秒记录",
    "no_flops_counter": "`/metrics` 没有 FLOPs / 读取字节计数器：算不出 MFU / MBU",
    "no_kv_usage_gauge": "`/metrics` 没有 KV 占用量",
    "no_preemption_counter": "`/metrics` 没有抢占与迭代计数器",
    "no_memory_line": "服务器日志没有显存账目行（`buffer size` / `Free memory on device`）",
    "no_request_records": "没有逐请求记录（`requests.jsonl`）：基准 JSON 只有分位数",
    "no_per_iteration_records": "没有逐次迭代的调度记录：采样只有每秒的累计和",
}
# a series (round · engine) that has the data another lacks
HAS_DATA = "有"

# The differences page (analysis/reconcile/differences.py)
FINDINGS.update(
    {
        ("differences", "ttft_growth_queue_share_pct"): "首 token 延迟从最低到最高并发的增长中排队所占份额",
        ("differences", "p99_itl_repeat_max_spread_pct"): "同一轮两次并发扫描的 p99 ITL 最大相差",
    }
)
FINDINGS.update(
    {
        ("gates", "sweep_requests_per_point_min"): "并发扫描每个点最少的请求数",
        ("gates", "sweep_requests_per_point_max"): "并发扫描每个点最多的请求数",
        ("gates", "sweep_one_wave_concurrencies"): "只跑了一波的并发点（请求数 ≤ 并发数）",
    }
)

# What a failed self-check found, said as a result (the gate's name says what passing means: "客户端未饱和"
# read after "未通过" is a double negative).
GATE_FAILED: dict[str, str] = {
    "completed": "没有全部完成",
    "no_failures": "有请求失败",
    "output_tokens": "输出 token 少于请求值",
    "input_tokens": "提示 token 数与计划不符",
    "stream_token_counts": "流式计数与服务器用量不符",
    "greedy": "没有强制贪心采样",
    "prefix_caching_off": "前缀缓存开着",
    "no_preemptions": "扫描中出现抢占",
    "fingerprint": "没有环境指纹",
    "client_not_saturated": "负载客户端跑满了（事件循环迟到，节奏由客户端决定）",
}
FINDINGS.update(
    {
        (
            "operating_point",
            "recommended_concurrency",
        ): "推荐并发（每多一个请求仍换来至少半路单流吞吐的最高并发）",
    }
)


# --- sentences a finding's verdict selects (issue #19): analysis decides the code, the page fills the numbers
# (each placeholder is a value the template has already formatted) -------------------------------------
PHRASES: dict[str, str] = {
    # the TTFT split of the overload point (analysis.reconcile.ttft: histogram_verdict, prompt_timing_verdict)
    "ttft.queue": (
        "其中排队 {wait}（{share}），预填充计算只有 {work}：慢在等，不在算——更快的卡只能缩短计算那一小段"
    ),
    "ttft.compute": "其中排队 {wait}（{share}），预填充计算 {work}：计算占了大头——更快的卡会直接缩短它",
    "ttft.outside": (
        "其中排队 {wait}（{share}）、预填充计算 {work}，其余 {rest}在引擎的排队与预填充直方图之外"
        "（前端、网络、反分词）：既不是排队也不是预填充计算，更快的卡和限流都不直接缩短它"
    ),
    "ttft.batch_prefill": (
        "其中 {wait}（{share}）不在请求自己的提示计算（{work}）里：并发 {conc}、槽数 {slots}，"
        "没有请求等槽位，它等的是同一批里其他请求的预填充——这也是计算，更快的卡会缩短它"
    ),
    "ttft.slot_or_batch": (
        "其中 {wait}（{share}）不在请求自己的提示计算（{work}）里：等槽位还是等同批里"
        "其他请求的预填充，llama.cpp 没有排队直方图，分不开"
    ),
    # the overload point's decoding against the sweep's (analysis.reconcile.overload.decode_verdict)
    "decode.unchanged": "解码没有变慢，多出来的首 token 延迟是在等",
    "decode.slower": "解码也变慢了",
    # a change's verb from its sign (analysis.reconcile.concurrency.change_direction)
    "change.up": "涨到",
    "change.down": "反而降到",
    "change.same": "仍是",
    # the knee (analysis.reconcile.concurrency: p50_shape, tail_share, knee_cause)
    "knee_p50.flat": "p50 几乎不变（{change}）",
    "knee_p50.up": "p50 也涨了 {change}：多数间隔都在变慢，不只是尾巴",
    "knee_p50.down": "p50 反而变了 {change}",
    "knee_tail.few": "p90 是 p50 的 {r90}、p99 是 {r99}：超过 p50 两倍的间隔在百分之一到十分之一之间",
    "knee_tail.many": "p90 已是 p50 的 {r90}、p99 是 {r99}：至少十分之一的间隔超过 p50 的两倍",
    "knee_cause.chunked_prefill": (
        "vLLM 开着分块预填充（日志 enable_chunked_prefill=True）：新请求的提示被切成块，"
        "和正在解码的请求放进同一次迭代，带着预填充块的那几次迭代变长，其余照旧"
    ),
    "knee_cause.prefill_steps": "新请求的预填充和正在解码的请求挤进同一次迭代：带着预填充的那几次迭代变长",
    "knee_cause.llamacpp_bimodal": (
        "llama.cpp 的 ITL 分成两群：只做解码的步很短；有槽位在处理新提示的那一步，"
        "要把提示{batch}和其他槽的解码一起算，间隔长出一截——p99 是 p90 的两倍以上"
    ),
    "knee_cause.llamacpp_batch": (
        "llama.cpp 把新请求的提示{batch}和其他槽的解码放进同一步：这些步的间隔更长"
    ),
    "knee_batch": "（每步最多 {n} 个 token，日志的 n_batch）",
    # what a capacity figure counts (analysis.reconcile.overload: the resident share's basis)
    "capacity_basis.log_max_concurrency": "启动日志的最大并发",
    "capacity_basis.slots": "槽数",
    # halving --max-model-len against the overload's requests (PageContext.half_model_len_effect)
    "half_len.rejected": "超过减半后的上限 {limit} token，会被直接拒绝",
    "half_len.unchanged": "驻留数不会因此变化",
    # the same causes in one clause (the answers on home and the overviews; in full on the curve page)
    "knee_cause_brief.chunked_prefill": "vLLM 的分块预填充把新提示的块放进正在解码的迭代，这几次迭代变长",
    "knee_cause_brief.prefill_steps": "新请求的预填充挤进正在解码的迭代，这几次迭代变长",
    "knee_cause_brief.llamacpp_bimodal": "llama.cpp 处理新提示的那一步连同其他槽的解码一起算，间隔长出一截",
    "knee_cause_brief.llamacpp_batch": "llama.cpp 把新提示和其他槽的解码放进同一步，这些步更长",
    # why an engine's sweep outputs came back short (analysis.reconcile.gates.shortfall_cause)
    "shortfall.early_stop": (
        "{engine} 的输出比所请求的少 {pct}（缺 {n} token）：请求写满之前就停了（没有按 ignore-eos 继续）"
    ),
    "shortfall.slot_full": (
        "{engine} 的输出比所请求的少 {pct}（缺 {n} token）：请求超过每槽上下文，槽写满即被截断"
    ),
    "shortfall_effect": (
        "输出吞吐只数实际输出的 token：少输出意味着少几步解码，每步的速度不变，吞吐不会因此被高估"
    ),
    # a measured step ratio against the byte ratio: the gap is the two sides' roofline achievements' ratio
    "step_gap.below": "实测比字节之比小，差距正是两边达到带宽下限的比例之比（{a} {pa}，{b} {pb}）",
    "step_gap.above": "实测比字节之比大，差距正是两边达到带宽下限的比例之比（{a} {pa}，{b} {pb}）",
    # the same verdict as the TTFT figure's caption reads it
    "ttft_caption.queue": "看排队部分何时开始主导：低并发时 TTFT 几乎全是预填充，过载时几乎全是排队。",
    "ttft_caption.compute": "过载时最大的一段是预填充。",
    "ttft_caption.outside": "过载时最大的一段是其余：排队与预填充直方图之外的时间。",
    "ttft_caption.batch_prefill": (
        "llama.cpp 只分预填充与其余；过载时其余的大部分是等同一批里其他请求的预填充。"
    ),
    "ttft_caption.slot_or_batch": "llama.cpp 只分预填充与其余。",
    # the same verdict as advice (the overview's 「限流还是换更快的卡」)
    "ttft_advice.queue": (
        "排队占大头：在服务前面限流，把同时在途的请求压在容量附近；更快的卡只能缩短计算那一段"
    ),
    "ttft_advice.compute": "计算占大头：更快的卡（或更短的提示）才有用，限流帮不上",
    "ttft_advice.outside": "排队和预填充都不是大头：先看前端与网络，换卡和限流都不直接缩短它",
    "ttft_advice.batch_prefill": (
        "等的是同批里其他请求的预填充：这是计算，更快的卡会缩短它；"
        "想让单个请求的首 token 更早，就少让提示同时进来（限流）"
    ),
    "ttft_advice.slot_or_batch": "等槽位与等同批预填充分不开：先让并发不超过槽数，再看剩下的等待",
}


def phrase(code: str, **values: object) -> str:
    """The sentence a verdict code selects, its placeholders filled with the page's formatted values."""
    return PHRASES[code].format(**values)


FINDINGS_FOR_ENGINE[("overload", "ttft_queue_share_pct", "llamacpp")] = (
    "过载时等待（TTFT − 请求自己的提示计算）占平均 TTFT 的比例"
)
FINDINGS[("selection", "best_at_every_budget_min_lead_pct")] = "每个预算下都是同一个系列最好：它最少领先多少"

# the link under every table of a page to the CSV of what the table shows (analysis/report/table_downloads)
DOWNLOAD_TABLE_CSV = "下载本表（CSV）"
# the links under every figure (analysis/report/figures): the points it draws, and its whole Vega-Lite spec
DOWNLOAD_FIGURE_CSV = "下载图中数据（CSV）"
DOWNLOAD_FIGURE_SPEC = "图的定义（Vega-Lite JSON）"
