"""Number formatting for the Chinese pages: thousands separators (千分位), units, sensible precision.

ASCII only (the Chinese words around a number live in the templates). Every function takes a plain number
and returns a string; ``None``/NaN become an em dash so a gap in the data shows as a gap, not as 0.
"""

from __future__ import annotations

import math
from numbers import Real

MISSING = "—"


def _is_missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def sig_digits_decimals(x: float, sig: int = 3) -> int:
    """Decimals that keep ``sig`` significant digits for |x| < 10**sig, none for larger numbers."""
    if x == 0 or not math.isfinite(x):
        return 0
    magnitude = math.floor(math.log10(abs(x)))
    return max(0, sig - 1 - magnitude)


def fmt_num(x: object, decimals: int | None = None, sig: int = 3) -> str:
    """``12345.6`` → ``12,346``; ``0.01234`` → ``0.0123``; integers keep every digit."""
    if _is_missing(x):
        return MISSING
    if isinstance(x, bool):
        return "✓" if x else "✗"
    if isinstance(x, int):
        return f"{x:,}"
    if not isinstance(x, Real):
        return str(x)
    x = float(x)
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if decimals is None:
        decimals = sig_digits_decimals(x, sig)
    text = f"{x:,.{decimals}f}"
    if text.startswith("-") and float(text.replace(",", "")) == 0:
        text = text[1:]  # "-0.0" reads like a sign that means something
    return text


def fmt_int(x: object) -> str:
    if _is_missing(x):
        return MISSING
    return f"{round(float(x)):,}"  # type: ignore[arg-type]


def fmt_pct(x: object, decimals: int | None = None) -> str:
    """A value already in percent: ``12.345`` → ``12.3%``; small ones keep two significant digits."""
    if _is_missing(x):
        return MISSING
    x = float(x)  # type: ignore[arg-type]
    if decimals is None:
        decimals = 1 if abs(x) >= 1 or x == 0 else sig_digits_decimals(x, 2)
    return f"{fmt_num(x, decimals)}%"


def fmt_signed_pct(x: object, decimals: int | None = None) -> str:
    """An error or a delta in percent, always with its sign: ``+1.2%``, ``−0.4%``."""
    if _is_missing(x):
        return MISSING
    x = float(x)  # type: ignore[arg-type]
    text = fmt_pct(abs(x), decimals)
    if text.strip("0.%") == "":
        return text
    return ("+" if x > 0 else "−") + text


def fmt_fraction_pct(x: object, decimals: int | None = None) -> str:
    """A 0–1 fraction shown in percent: ``0.9123`` → ``91.2%``."""
    if _is_missing(x):
        return MISSING
    return fmt_pct(float(x) * 100.0, decimals)  # type: ignore[arg-type]


_BINARY = [("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)]


def fmt_bytes(n: object) -> str:
    """``15231233024`` → ``14.19 GiB`` (binary units, as GPU memory is reported)."""
    if _is_missing(n):
        return MISSING
    n = float(n)  # type: ignore[arg-type]
    for unit, size in _BINARY:
        if abs(n) >= size:
            return f"{fmt_num(n / size, sig=4 if abs(n) / size < 1000 else 3)} {unit}"
    return f"{fmt_int(n)} B"


# How a finding's unit string is shown. Keys are the units the analysis writes (snake_case or symbols).
_UNIT_SUFFIX = {
    "ms": " ms",
    "s": " s",
    "us": " µs",
    "tokens": " token",
    "token": " token",
    "tokens_per_s": " token/s",
    "tokens/s": " token/s",
    "tok/s": " token/s",
    "requests_per_s": " req/s",
    "req/s": " req/s",
    "gib": " GiB",
    "GiB": " GiB",
    "mib": " MiB",
    "MiB": " MiB",
    "gflop": " GFLOP",
    "GFLOP": " GFLOP",
    "flop": " FLOP",
    "FLOP": " FLOP",
    "tflop_per_s": " TFLOP/s",
    "TFLOP/s": " TFLOP/s",
    "gb_per_s": " GB/s",
    "GB/s": " GB/s",
    "x": "×",
    "ratio": "×",
    "w": " W",
    "W": " W",
    "requests": "",
    "count": "",
    "": "",
}


def fmt_value(value: object, unit: str | None = None) -> str:
    """A finding's value with its unit: percent, bytes, booleans and counts each their own way."""
    unit = unit or ""
    if isinstance(value, bool):
        return "✓" if value else "✗"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt_value(v, unit) for v in value)
    if isinstance(value, str) or _is_missing(value) or not isinstance(value, Real):
        return MISSING if _is_missing(value) else str(value)
    u = unit.strip()
    if u in ("pct", "%", "percent"):
        return fmt_pct(value)
    if u in ("fraction",):
        return fmt_fraction_pct(value)
    if u in ("bytes", "B", "byte"):
        return fmt_bytes(value)
    if u in ("bytes_per_token", "B/token"):
        return f"{fmt_num(value)} B/token"
    if u in _UNIT_SUFFIX:
        return fmt_num(value) + _UNIT_SUFFIX[u]
    return f"{fmt_num(value)} {u}"
