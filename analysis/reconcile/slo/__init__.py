"""Goodput and the SLO planners (issue #14, items 2 and 3): one concept, four modules — ``budgets`` (the SLOs
and budgets judged by, goodput of a point, log2 interpolation), ``planner`` (per concurrency sweep),
``rate_planner`` (per open-loop rate sweep) and ``section`` (findings, tables, ``run``). What other modules
use is named here.

Goodput (per point, SLOs given at analysis time): the requests of a point meeting every SLO, per request
(``analysis.core.metrics.meets_slos``: vllm bench serve's ``--goodput`` semantics), ÷ the point's duration.
Exact
only where the run kept one record per request (``requests.jsonl``, our own runs); a file of percentiles (the
reference campaign's bench JSON) cannot say which requests met all SLOs at once: n/a with that reason.

The planner, per round and engine: the highest concurrency whose p99 TTFT (and p99 ITL, when given) stays
within the budget. Method: the sweep's gated points in concurrency order; the highest point within the budget
and the next one up bracket the answer (lower points over the budget are named: p99 not monotone); between
them p99 is taken as linear in log2(concurrency) (``interpolate_log2``); with two budgets the lower
concurrency binds. Our campaigns and the reference are closed-loop only (fixed concurrency, no request-rate
arrivals): the answer is a concurrency, with the request throughput interpolated the same way. Where the
measured points do not bracket the budget it names the point to measure next and writes the ``[[phase]]``
stanza for it. The settings that follow come from the server log's KV pool line and the capacity theory
(``analysis.core.theory``).
"""

from analysis.reconcile.slo.budgets import (
    ENGINES,
    P99_BUDGET_KEYS,
    REFERENCE_TTFT_P99_MS,
    SloError,
    default_budget_ms,
    interpolate_log2,
    parse_p99_budgets,
    parse_slos,
    point_goodput,
    slos_for,
    value_at_log2,
)
from analysis.reconcile.slo.planner import (
    PlannerPoint,
    PointReaders,
    SloAnswer,
    admission_limit,
    answer_concurrency,
    describe,
    kv_max_num_seqs,
    plan_stanza,
    plan_sweep,
)
from analysis.reconcile.slo.rate_planner import (
    RateAnswer,
    RateMeasured,
    answer_rates,
    describe_rate,
    rate_stanza,
)
from analysis.reconcile.slo.section import (
    answer_findings,
    describe_any,
    goodput_findings,
    max_running,
    rate_answer_findings,
    run,
)

__all__ = [
    "ENGINES",
    "REFERENCE_TTFT_P99_MS",
    "PlannerPoint",
    "PointReaders",
    "RateAnswer",
    "RateMeasured",
    "SloAnswer",
    "SloError",
    "admission_limit",
    "answer_findings",
    "default_budget_ms",
    "describe",
    "describe_any",
    "describe_rate",
    "goodput_findings",
    "interpolate_log2",
    "kv_max_num_seqs",
    "max_running",
    "P99_BUDGET_KEYS",
    "parse_p99_budgets",
    "parse_slos",
    "answer_concurrency",
    "answer_rates",
    "plan_sweep",
    "plan_stanza",
    "point_goodput",
    "rate_answer_findings",
    "rate_stanza",
    "run",
    "slos_for",
    "value_at_log2",
]
