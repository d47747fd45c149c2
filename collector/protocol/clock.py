"""The only place the collector reads clocks: every observation carries both clocks.

Monotonic nanoseconds order and difference events within one process (they never jump); wall-clock
nanoseconds (Unix epoch) line observations up with logs and other machines. Tests inject a fake clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


class Clock(Protocol):
    def mono_ns(self) -> int: ...

    def unix_ns(self) -> int: ...


class SystemClock:
    """CLOCK_MONOTONIC and the system wall clock, both in integer nanoseconds."""

    def mono_ns(self) -> int:
        return time.monotonic_ns()

    def unix_ns(self) -> int:
        return time.time_ns()


@dataclass(frozen=True)
class Stamp:
    mono_ns: int
    unix_ns: int

    def as_dict(self, prefix: str = "") -> dict[str, int]:
        return {f"{prefix}mono_ns": self.mono_ns, f"{prefix}unix_ns": self.unix_ns}


def stamp(clock: Clock) -> Stamp:
    """Read both clocks, monotonic first (it is the one durations are computed from)."""
    return Stamp(clock.mono_ns(), clock.unix_ns())


def process_cpu_ns() -> int:
    """CPU time of this process (user + system), for measuring the client's own cost."""
    return time.process_time_ns()


SYSTEM_CLOCK = SystemClock()
