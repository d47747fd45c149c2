"""The open-loop schedule (``collector.protocol.loadgen.arrival_offsets_ns``) and the rate phase of a plan
(``collector.raw.plan``): deterministic in its seed, the offered rate and burstiness as `vllm bench serve`
defines them (within statistical bounds), the ramp-up, the stop conditions, and one clear line for every
nonsense setting."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from collector.protocol.loadgen import arrival_offsets_ns, resolve_rate_point
from collector.raw.errors import PlanError
from collector.raw.plan import RatePlan, parse_plan


def _gaps_s(rate: RatePlan, seed: int = 7) -> np.ndarray:
    t = np.asarray(arrival_offsets_ns(rate, seed), dtype=float) / 1e9
    return np.diff(np.concatenate([[0.0], t]))


def test_same_seed_same_schedule_other_seed_another():
    r = RatePlan(request_rate=5.0, duration_s=20.0)
    a, b, c = arrival_offsets_ns(r, 1), arrival_offsets_ns(r, 1), arrival_offsets_ns(r, 2)
    assert a == b and a != c
    assert all(isinstance(x, int) for x in a) and a == sorted(a) and a[0] > 0


@pytest.mark.parametrize("arrival,b", [("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0), ("constant", 1.0)])
def test_mean_rate_and_coefficient_of_variation(arrival, b):
    """Over T = 2,000 s at 5 req/s the count is within 5 sd of λT (Poisson: sd √(λT); a gamma renewal
    process: sd √(λT)·CV); the gaps' CV is 1/√b (0 for constant) within 5 %."""
    lam, horizon = 5.0, 2000.0
    r = RatePlan(request_rate=lam, arrival=arrival, burstiness=b, duration_s=horizon)
    n = len(arrival_offsets_ns(r, 11))
    cv_expected = 0.0 if arrival == "constant" else 1 / math.sqrt(b)
    sd = math.sqrt(lam * horizon) * max(cv_expected, 1e-9)
    assert abs(n - lam * horizon) <= max(5 * sd, 1), (n, sd)
    g = _gaps_s(r, 11)
    assert g.mean() == pytest.approx(1 / lam, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(cv_expected, abs=0.05 * max(cv_expected, 0.02))


def test_burstiness_below_one_clusters_arrivals():
    """The same rate, burstiness 0.25 vs Poisson: more gaps far below the mean (clusters), as vllm's
    ``--burstiness`` < 1 is meant to give."""
    pois = _gaps_s(RatePlan(request_rate=10.0, max_requests=5000))
    bursty = _gaps_s(RatePlan(request_rate=10.0, arrival="gamma", burstiness=0.25, max_requests=5000))
    assert (bursty < 0.01).mean() > 2 * (pois < 0.01).mean()


def test_linear_ramp_up_follows_the_rising_rate():
    """0 → 10 req/s over 100 s then 10 req/s: the cumulative load is Λ(t) = t²/20 for t ≤ 100 (500 at 100 s,
    125 at 50 s), 500 + 10(t − 100) after; constant arrivals land on it to within one request, Poisson ones
    within 5 sd."""
    base = dict(request_rate=10.0, ramp_up_strategy="linear", ramp_up_start_rps=0.0, ramp_up_duration_s=100.0)
    t = np.asarray(arrival_offsets_ns(RatePlan(arrival="constant", duration_s=200.0, **base), 0)) / 1e9
    assert abs((t < 50).sum() - 125) <= 1 and abs((t < 100).sum() - 500) <= 1 and abs(len(t) - 1500) <= 1
    g = np.diff(t)
    assert g[:50].mean() > 3 * g[-50:].mean()  # sparse at the start, 0.1 s apart at the end
    assert g[-50:].mean() == pytest.approx(0.1, rel=1e-6)
    p = np.asarray(arrival_offsets_ns(RatePlan(duration_s=200.0, **base), 3)) / 1e9
    for lo, hi, expected in ((0, 50, 125), (50, 100, 375), (100, 200, 1000)):
        got = ((p >= lo) & (p < hi)).sum()
        assert abs(got - expected) <= 5 * math.sqrt(expected), (lo, hi, got)


def test_stop_conditions_cut_the_schedule():
    r = RatePlan(request_rate=100.0, duration_s=1.0, max_requests=30)
    assert len(arrival_offsets_ns(r, 5)) == 30  # the cap comes first
    t = arrival_offsets_ns(RatePlan(request_rate=100.0, duration_s=1.0), 5)
    assert t[-1] < 1e9 and 60 < len(t) < 140  # 100 ± 4 sd
    assert arrival_offsets_ns(RatePlan(request_rate=4.0, arrival="constant", max_requests=3), 0) == [
        250_000_000,
        500_000_000,
        750_000_000,
    ]


_HEAD = """campaign = "c"
[server]
engine = "llamacpp"
binary = "/x/llama-server"
model = "/x/m.gguf"
[model]
config = "Qwen2.5-7B-Instruct"
gpu = "cpu"
token_id_range = [32, 127]
"""


def _plan(phase: str) -> object:
    return parse_plan(_HEAD + '[[phase]]\nname = "r"\nkind = "rate"\n' + phase, Path("p.toml"))


def test_a_rate_phase_makes_one_point_per_rate():
    plan = _plan("request_rates = [2, 8.5]\nseed = 10\ninput_len = 64\noutput_len = 8\nduration_s = 3\n"
                 "max_concurrency = 4\narrival = \"gamma\"\nburstiness = 0.5\n")  # fmt: skip
    a, b = plan.points
    assert (a.point_id, b.point_id) == ("p00-r-r2-i64-o8", "p01-r-r8.5-i64-o8")
    assert (a.seed, b.seed) == (10, 11) and a.concurrency == 4 and a.rate.burstiness == 0.5
    pt, offs = resolve_rate_point(b)
    assert pt.requests == len(offs) > 0 and offs == arrival_offsets_ns(b.rate, 11)


_B = "seed = 1\ninput_len = 8\noutput_len = 8\n"  # a rate phase's lengths and seed
_R = "request_rates = [1]\n" + _B + "max_requests = 3\n"  # ... with one rate and a stop condition


@pytest.mark.parametrize(
    "phase,key",
    [
        ("request_rates = [0]\n" + _B + "duration_s = 1\n", "request_rates[0]"),
        ("request_rates = [1]\n" + _B, "duration_s"),
        (_R + "concurrency = 2\n", "concurrency"),
        (_R + "burstiness = 2\n", "burstiness"),
        (_R + 'arrival = "gamma"\n', "burstiness"),
        (_R + "ramp_up_start_rps = 0.5\n", "ramp_up_strategy"),
        (_R + 'ramp_up_strategy = "exponential"\nramp_up_start_rps = 0.5\nramp_up_duration_s = 1\n',
         "ramp_up_strategy"),
        (_R + 'ramp_up_strategy = "linear"\nramp_up_start_rps = 2\nramp_up_duration_s = 1\n',
         "ramp_up_start_rps"),
        (_R + "max_error_rate = 2\n", "max_error_rate"),
        (_R + 'arrival = "uniform"\n', "arrival"),
        (_B + "max_requests = 3\n", "request_rates"),
        ("request_rates = [1, 1]\n" + _B + "max_requests = 3\n", "request_rates"),
    ],
)  # fmt: skip
def test_nonsense_is_one_line_naming_file_and_key(phase, key):
    with pytest.raises(PlanError) as e:
        _plan(phase)
    msg = str(e.value)
    assert msg.startswith("p.toml: ") and key in msg and "\n" not in msg, msg


def test_rate_keys_are_refused_on_a_closed_loop_phase():
    phase = '[[phase]]\nname = "s"\nkind = "concurrency"\nconcurrency = 2\nrequests = 2\n'
    with pytest.raises(PlanError, match=r"p.toml: \[\[phase\]\] #1.max_concurrency: only a kind = \"rate\""):
        parse_plan(_HEAD + phase + _B + "max_concurrency = 3\n", Path("p.toml"))
