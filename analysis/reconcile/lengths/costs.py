"""What the length sweep costs per input token and per output, in the reference study's words: the prefill
wall time per input token at the shortest and the longest input, the fork of the two throughputs (output
falls while total rises), how much the median and the p99 TTFT grow, and the share of the longest input's
mean TTFT that is pure prefill compute (the single-stream prefill of the same round, scaled to that length).

Keys: ``<round>.length.<engine>.<metric>`` (imported campaigns), ``runs.<run>.length.<metric>`` (ours).
"""

from __future__ import annotations

import pandas as pd

from analysis.core import findings as fnd
from analysis.core.keys import At
from analysis.reconcile import Section, SectionInput, engine_at

LENGTH = "length_sweep"


def per_input_token_ms(prefill_ms: float, input_len: float) -> float:
    """Prefill wall time per input token, ms/token: mean prefill time ÷ input length."""
    return prefill_ms / input_len


def growth(first: float, last: float) -> float:
    """How many times the last value is the first, ratio: last ÷ first."""
    return last / first


def change_pct(first: float, last: float) -> float:
    """Change from the first to the last value, %: (last ÷ first − 1) × 100."""
    return (last / first - 1.0) * 100.0


def compute_share_pct(
    single_prefill_ms: float, single_input: float, input_len: float, mean_ttft: float
) -> float:
    """Share of a mean TTFT that is pure prefill compute, %: the single-stream prefill scaled linearly to this
    input (prefill ms at concurrency 1 × input ÷ its input) ÷ mean TTFT × 100."""
    return single_prefill_ms * input_len / single_input / mean_ttft * 100.0


def _cite(row: pd.Series, field: str) -> str:
    return f"{row['file']}:{field}"


def _num(row: pd.Series, col: str) -> float | None:
    v = row.get(col)
    return None if v is None or pd.isna(v) else float(v)


def _throughputs(at: At, lo: pd.Series, hi: pd.Series) -> list[fnd.Finding]:
    out = []
    for metric, col in (
        ("output_throughput_change_pct", "output_throughput_tokens_per_s"),
        ("total_throughput_change_pct", "total_throughput_tokens_per_s"),
    ):
        a, b = _num(lo, col), _num(hi, col)
        if a and b is not None:
            out.append(
                fnd.measured(
                    at(metric), change_pct(a, b), "%", [_cite(lo, col), _cite(hi, col)], shortest=a, longest=b
                )
            )
    return out


def _axes(at: At, hi: pd.Series, same: pd.DataFrame) -> list[fnd.Finding]:
    """The concurrency sweep's highest point against the longest input: output tokens/s for a comparable KV
    use (the reference's two axes), ratio: sweep's top output tokens/s ÷ longest input's."""
    sweep = same[same["test_kind"] == "concurrency_sweep"]
    b = _num(hi, "output_throughput_tokens_per_s")
    if sweep.empty or not b:
        return []
    top = sweep.sort_values("concurrency").iloc[-1]
    a = _num(top, "output_throughput_tokens_per_s")
    if not a:
        return []
    col = "output_throughput_tokens_per_s"
    return [
        fnd.measured(
            at("output_throughput_sweep_top_over_longest_input"),
            a / b,
            "ratio",
            [_cite(top, col), _cite(hi, col)],
            sweep_concurrency=int(top["concurrency"]),
        )
    ]


def _ttft(at: At, lo: pd.Series, hi: pd.Series) -> list[fnd.Finding]:
    out = []
    for metric, col in (("p50_ttft_growth", "p50_ttft_ms"), ("p99_ttft_growth", "p99_ttft_ms")):
        a, b = _num(lo, col), _num(hi, col)
        if a and b is not None:
            out.append(
                fnd.measured(
                    at(metric),
                    growth(a, b),
                    "ratio",
                    [_cite(lo, col), _cite(hi, col)],
                    shortest_ms=a,
                    longest_ms=b,
                )
            )
    return out


def _prefill(at: At, lo: pd.Series, hi: pd.Series, single: pd.Series | None) -> list[fnd.Finding]:
    out: list[fnd.Finding] = []
    pa, pb = _num(lo, "mean_prefill_ms"), _num(hi, "mean_prefill_ms")
    la, lb = _num(lo, "input_len_tokens"), _num(hi, "input_len_tokens")
    if pa and pb and la and lb:
        a, b = per_input_token_ms(pa, la), per_input_token_ms(pb, lb)
        out.append(
            fnd.measured(
                at("prefill_wall_ms_per_input_token_longest"),
                b,
                "ms/token",
                [_cite(hi, "mean_prefill_ms")],
                shortest_ms_per_token=a,
                cheaper_than_shortest=a / b,
            )
        )
    ttft = _num(hi, "mean_ttft_ms")
    if single is not None and ttft and lb:
        sp, sl = _num(single, "mean_prefill_ms"), _num(single, "input_len_tokens")
        if sp and sl:
            out.append(
                fnd.measured(
                    at("ttft_compute_share_at_longest_input_pct"),
                    compute_share_pct(sp, sl, lb, ttft),
                    "%",
                    [_cite(single, "mean_prefill_ms"), _cite(hi, "mean_ttft_ms")],
                    single_stream_prefill_ms=sp,
                )
            )
    return out


def _at(rnd: object, engine: str, run: str, own: bool) -> At:
    """An imported round's engine, or one of our own runs (a run holds its own sweep and length phases)."""
    if own:
        return At(level="run", run=run, engine=engine, topic="length")
    return engine_at(rnd if isinstance(rnd, str) and rnd else None, engine, topic="length")


def run(s: SectionInput) -> Section:
    points, own = s.points, s.campaign.own
    findings: list[fnd.Finding] = []
    if points.empty:
        return Section(name="length_costs")
    pts = points[~points["warmup"].astype(bool)]
    pts = pts.assign(run=pts["key"].astype(str).str.rsplit("/", n=1).str[0])
    group = ["run"] if own else ["round", "engine"]
    for _, g in pts[pts["test_kind"] == LENGTH].groupby(group, dropna=False):
        g = g.sort_values("input_len_tokens")
        if len(g) < 2 or "mean_prefill_ms" not in g:
            continue
        lo, hi = g.iloc[0], g.iloc[-1]
        at = _at(hi["round"], str(hi["engine"]), str(hi["run"]), own)
        same = (
            pts["run"] == hi["run"]
            if own
            else (pts["round"] == hi["round"]) & (pts["engine"] == hi["engine"])
        )
        c1 = pts[
            same & (pts["concurrency"] == 1) & (pts["test_kind"] != LENGTH) & pts["mean_prefill_ms"].notna()
        ]
        findings += _throughputs(at, lo, hi) + _ttft(at, lo, hi) + _axes(at, hi, pts[same])
        findings += _prefill(at, lo, hi, c1.iloc[0] if len(c1) else None)
    return Section(name="length_costs", findings=findings)
