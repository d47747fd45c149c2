"""The floor of any httpx-based streaming client: closed-loop streams that only read the bytes and stamp each
event (a bytes split, no JSON, no record), one AsyncClient per worker as the collector does. The fidelity
bench runs it beside our client: the difference is what our own per-chunk work costs; this row is what
httpx + httpcore + h11 + asyncio cost by themselves.

    python benchmarks/httpx_floor.py URL CONCURRENCY REQUESTS OUTPUT_LEN OUT.json
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time

import httpx


async def main(url: str, c: int, n: int, out_len: int, out: str) -> None:
    nxt, recs = 0, []
    tls = ssl.create_default_context()
    body = {"model": "metronome", "prompt": list(range(32, 96)), "max_tokens": out_len, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip

    async def worker() -> None:
        nonlocal nxt
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=1), verify=tls, timeout=60) as cl:
            while nxt < n:
                nxt += 1
                send, stamps, first, buf = time.monotonic_ns(), [], b"", b""
                async with cl.stream("POST", f"{url}/v1/completions", json=body) as r:
                    async for raw in r.aiter_raw():
                        t = time.monotonic_ns()
                        buf += raw
                        *events, buf = buf.split(b"\n\n")
                        for ev in events:
                            if b'"text"' in ev:
                                stamps.append(t)
                                first = first or ev
                i = first.find(b'"id":"') + 6
                recs.append(
                    {"id": first[i : first.index(b'"', i)].decode(), "send_ns": send, "recv_ns": stamps}
                )

    await asyncio.gather(*(worker() for _ in range(c)))
    with open(out, "w") as fh:
        json.dump(recs, fh)


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], int(a[1]), int(a[2]), int(a[3]), a[4]))
