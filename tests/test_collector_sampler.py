"""The sampler's schedule: tick k is due at start + k * interval exactly (no drift), late ticks are skipped
and show as jumps in k, and /metrics failures become one event, not a crash."""

from __future__ import annotations

import threading

from collector.protocol.sampler import Sampler


class ListLog:
    def __init__(self):
        self.rows, self._lock = [], threading.Lock()

    def write(self, obj):
        with self._lock:
            self.rows.append(obj)


def _sample(server, interval_s, until_rows):
    log, events = ListLog(), []
    s = Sampler(server.url, interval_s, log, lambda kind, **f: events.append((kind, f)))
    done = threading.Event()
    orig = log.write

    def write(obj):
        orig(obj)
        if len(log.rows) >= until_rows:
            done.set()

    log.write = write
    s.start()
    assert done.wait(30)
    s.stop()
    return s, log.rows, events


def test_ticks_follow_the_grid_without_drift(fault_server):
    srv = fault_server()
    s, rows, events = _sample(srv, 0.05, 8)
    interval_ns = 50_000_000
    start = rows[0].due_mono_ns
    ks = [r.k for r in rows]
    assert ks[0] == 0 and all(b > a for a, b in zip(ks, ks[1:], strict=False))
    assert all(r.due_mono_ns - start == r.k * interval_ns for r in rows)
    assert all(r.start_mono_ns >= r.due_mono_ns and r.status == 200 and r.text for r in rows)
    assert s.skipped_ticks >= ks[-1] + 1 - len(ks) and events == []  # any jump in k was counted as skipped


def test_slow_scrapes_skip_ticks_instead_of_stretching_the_interval(fault_server):
    srv = fault_server(metrics_delay_s=0.12)
    s, rows, _ = _sample(srv, 0.05, 4)
    ks = [r.k for r in rows]
    assert all(
        b - a >= 2 for a, b in zip(ks, ks[1:], strict=False)
    )  # a 120 ms scrape spans 2+ ticks of 50 ms
    assert s.skipped_ticks >= sum(b - a - 1 for a, b in zip(ks, ks[1:], strict=False)) > 0
    start = rows[0].due_mono_ns
    assert all((r.due_mono_ns - start) == r.k * 50_000_000 for r in rows)


def test_metrics_going_away_is_one_event_and_scraping_goes_on(fault_server):
    srv = fault_server(metrics_down_after=2)
    _, rows, events = _sample(srv, 0.05, 6)
    assert [r.status for r in rows[:3]] == [200, 200, 503]
    assert [k for k, _ in events] == ["metrics_unreachable"] and events[0][1]["status"] == 503
