"""Secrets never reach raw/: the one scrub every writer of the store applies (``collector.raw.store.Run``).

A run's secrets (the API key, secret headers, literal secrets of ``[server].env`` and ``[server].args``:
``collector.fingerprint.plan_secrets``) are replaced by ``<redacted>`` wherever they appear: in a response
body that quotes the rejected key, a server log line, an event, the seal's note. A secret is matched as
written and as JSON spells it inside a string (``"`` and ``\\`` escaped, non-ASCII as ``\\uXXXX`` or kept), so
a key quoted in a serialized body is found too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted>"


def secret_forms(secrets: Iterable[str]) -> list[str]:
    """Every spelling of each secret a written record can hold (as is, JSON-escaped with and without
    ``ensure_ascii``), longest first so a secret inside another is replaced after it."""
    forms = set()
    for s in secrets:
        if s:
            forms |= {s, json.dumps(s)[1:-1], json.dumps(s, ensure_ascii=False)[1:-1]}
    return sorted(forms, key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every spelling of each secret replaced by ``<redacted>``."""
    for form in secret_forms(secrets):
        text = text.replace(form, REDACTED)
    return text


def scrub_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """``data`` with every UTF-8 spelling of each secret replaced by ``<redacted>``."""
    for form in secret_forms(secrets):
        data = data.replace(form.encode("utf-8", "surrogatepass"), REDACTED.encode())
    return data


def scrub_obj(obj: Any, secrets: Iterable[str]) -> Any:
    """A JSON-like value with every string (keys too) scrubbed; tuples become lists, as JSON writes them."""
    if isinstance(obj, str):
        return scrub(obj, secrets)
    if isinstance(obj, dict):
        return {scrub_obj(k, secrets): scrub_obj(v, secrets) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [scrub_obj(v, secrets) for v in obj]
    return obj
