"""The load client's own cost, against a local llama-server serving the tiny model (not a test: a benchmark).

    python benchmarks/bench_client.py [--cache .engines] [--requests 16] [--output-len 256]

Prints, per concurrency: client CPU seconds per 1,000 streamed tokens (this process's user+system CPU time
while the point runs, over the tokens it received), and the gap between the client's TPOT and the server's
own per-token time (llama.cpp ``timings.predicted_per_token_ms``) — the client's measurement overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.protocol.clock import process_cpu_ns  # noqa: E402
from collector.protocol.loadgen import Abort, Listeners, LoadSettings, run_point  # noqa: E402
from collector.protocol.server import LlamaCppAdapter  # noqa: E402
from collector.raw.plan import PointPlan  # noqa: E402
from collector.raw.records import RequestRecord  # noqa: E402
from lab.engines import engine_paths  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client_tpot_ms(rec: RequestRecord) -> float:
    """Client TPOT, ms = (last token chunk − first token chunk) [ns] / 1e6 / (tokens − 1)."""
    t = [m for m, n in zip(rec.chunk_mono_ns, rec.chunk_tokens, strict=True) if n > 0]
    return (t[-1] - t[0]) / 1e6 / (sum(rec.chunk_tokens) - 1)


def measure(url: str, concurrency: int, requests: int, output_len: int) -> dict:
    recs: list[RequestRecord] = []
    pt = PointPlan(
        phase="bench",
        kind="concurrency",
        index=0,
        concurrency=concurrency,
        requests=requests,
        input_len=64,
        output_len=output_len,
        seed=concurrency,
        expect_preemptions="any",
    )
    cpu0, wall0 = process_cpu_ns(), time.monotonic_ns()
    asyncio.run(
        run_point(
            pt,
            LoadSettings(
                base_url=url,
                model="tiny",
                token_id_range=(32, 127),
                engine_extra=LlamaCppAdapter("llamacpp").request_extra(),
                plan_extra={},
                request_timeout_s=600,
                read_timeout_s=120,
            ),
            Listeners(sink=recs.append),
            Abort(),
        )
    )
    cpu_s, wall_s = (process_cpu_ns() - cpu0) / 1e9, (time.monotonic_ns() - wall0) / 1e9
    assert all(r.ok for r in recs), [r.error_message for r in recs if not r.ok]
    tokens = sum(sum(r.chunk_tokens) for r in recs)
    client = [client_tpot_ms(r) for r in recs]
    server = [r.engine_timings["predicted_per_token_ms"] for r in recs]
    return {
        "concurrency": concurrency,
        "requests": requests,
        "tokens": tokens,
        "wall_s": wall_s,
        "client_cpu_s": cpu_s,
        "client_cpu_s_per_1k_tokens": cpu_s / tokens * 1000,
        "client_tpot_ms_mean": statistics.fmean(client),
        "server_per_token_ms_mean": statistics.fmean(server),
        "tpot_gap_ms_mean": statistics.fmean(c - s for c, s in zip(client, server, strict=True)),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path, default=Path(".engines"))
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--output-len", type=int, default=256)
    args = ap.parse_args()
    paths = engine_paths(args.cache)
    port = _free_port()
    cmd = [
        str(paths.llama_server),
        "-m",
        str(paths.tiny_gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        "8",
        "-c",
        "8192",
        "-t",
        "1",
        "--cache-ram",
        "0",
        "--slot-prompt-similarity",
        "0",
    ]
    srv = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        measure(url, 4, 4, 32)  # warm-up, not reported
        for c in (1, 8):
            print(json.dumps(measure(url, c, args.requests, args.output_len)))
    finally:
        os.killpg(srv.pid, signal.SIGTERM)
        srv.wait()


if __name__ == "__main__":
    main()
