"""The load generator and the pure measurements of bench/serve.py.

A level is ``n`` requests from ``concurrency`` asyncio workers sharing one aiohttp
session (keep-alive, a connection per worker): each worker takes the next request
index until ``n`` are sent, so every level is a bounded loop. A request's latency is
from just before the POST to the end of its body (or the stream's ``[DONE]``); for a
stream, ``ttfb`` is the time to the first event that carries content. Bodies are
encoded before the clock starts and replies are checked against the schema only
after the level ends, so the generator's own work per request is small and the same
for every side.

Pure parts (tested in tests/test_bench_serve.py): :func:`percentile`,
:func:`integrity`, :func:`reply_rid`, :func:`summarize`.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RID_FIELD = re.compile(r'"rid"\s*:\s*"([^"]{1,64})"')


@dataclass
class Result:
    rid: str
    status: int = 0
    latency: float = math.nan  # seconds
    ttfb: float | None = None  # seconds to the first content event (streams)
    content: str | None = None
    error: str | None = None  # error type or transport failure
    jsonmode: dict[str, Any] | None = None
    conforming: bool = False
    got_rid: str | None = None


@dataclass
class Level:
    side: str
    concurrency: int
    stream: bool
    wall: float
    results: list[Result] = field(default_factory=list)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo = math.floor(k)
    hi = math.ceil(k)
    if lo == hi:
        return float(ordered[lo])
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo))


def reply_rid(content: str | None) -> str | None:
    """The ``rid`` a reply's content carries (JSON field, else the first ``"rid": "…"``)."""
    if content is None:
        return None
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    if isinstance(value, dict) and isinstance(value.get("rid"), str):
        return str(value["rid"])
    found = RID_FIELD.search(content)
    return found.group(1) if found else None


def integrity(sent: Sequence[str], received: Sequence[str | None]) -> dict[str, int]:
    """Lost, duplicated and mixed-up replies: ``received[i]`` is the rid in reply ``i``.

    lost: no reply (or none with a rid); mixed: a reply carries another request's
    rid (or one never sent); duplicated: a rid that more than one reply carries
    (counted once per extra copy).
    """
    if len(sent) != len(received):
        raise ValueError("one received entry per sent request")
    lost = sum(1 for got in received if got is None)
    mixed = sum(
        1 for want, got in zip(sent, received, strict=True) if got is not None and got != want
    )
    counts = Counter(got for got in received if got is not None)
    duplicated = sum(c - 1 for c in counts.values() if c > 1)
    return {"requests": len(sent), "lost": lost, "duplicated": duplicated, "mixed": mixed}


def request_body(rid: str, stream: bool, response_format: dict[str, Any]) -> bytes:
    body: dict[str, Any] = {
        "model": "bench",
        "messages": [{"role": "user", "content": f"Describe the item rid={rid} as JSON."}],
        "response_format": response_format,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


async def one_request(
    session: Any, url: str, result: Result, body: bytes, stream: bool, headers: dict[str, str]
) -> None:
    import aiohttp

    start = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as response:
            result.status = response.status
            if not stream or response.status != 200:
                raw = await response.read()
                result.latency = time.perf_counter() - start
                try:
                    reply = json.loads(raw)
                except ValueError:
                    result.error = f"http {response.status}: unparsable body"
                    return
                if response.status != 200 or "error" in reply:
                    error = reply.get("error") if isinstance(reply, dict) else None
                    kind = error.get("type") if isinstance(error, dict) else None
                    result.error = f"http {response.status}: {kind}"
                    return
                result.content = reply["choices"][0]["message"].get("content")
                result.jsonmode = reply.get("jsonmode")
                return
            parts: list[str] = []
            buffer = b""
            done = False
            async for data in response.content.iter_any():
                buffer = (buffer + data).replace(b"\r\n", b"\n")
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    if done or not event.startswith(b"data: "):
                        continue  # comments (": keep-alive") and other fields
                    payload = event[6:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    chunk = json.loads(payload)
                    if "error" in chunk:
                        error = chunk["error"]
                        kind = error.get("type") if isinstance(error, dict) else error
                        result.error = f"in-stream: {kind}"
                        done = True
                        continue
                    if chunk.get("jsonmode") is not None:
                        result.jsonmode = chunk["jsonmode"]
                    for choice in chunk.get("choices") or ():
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            if result.ttfb is None:
                                result.ttfb = time.perf_counter() - start
                            parts.append(piece)
            result.latency = time.perf_counter() - start
            if result.error is None:
                result.content = "".join(parts)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError) as exc:
        result.latency = time.perf_counter() - start
        result.error = f"transport: {type(exc).__name__}"


async def run_level(
    url: str,
    *,
    side: str,
    n: int,
    concurrency: int,
    stream: bool,
    prefix: str,
    response_format: dict[str, Any],
    api_key: str | None = None,
    timeout: float = 120.0,
) -> Level:
    """``n`` requests to ``url`` from ``concurrency`` workers; rids ``{prefix}-{i}``."""
    import aiohttp

    rids = [f"{prefix}-{i}" for i in range(n)]
    bodies = [request_body(rid, stream, response_format) for rid in rids]
    results = [Result(rid) for rid in rids]
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    next_index = 0
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=client_timeout) as session:

        async def worker() -> None:
            nonlocal next_index
            while next_index < n:
                i = next_index
                next_index += 1
                await one_request(session, url, results[i], bodies[i], stream, headers)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
        wall = time.perf_counter() - start
    return Level(side, concurrency, stream, wall, results)


def check(level: Level, validator: Any) -> None:
    """Fill ``conforming`` and ``got_rid`` of every result (after the timed run)."""
    for result in level.results:
        result.got_rid = reply_rid(result.content) if result.error is None else None
        if result.error is not None or result.content is None:
            continue
        try:
            value = json.loads(result.content)
        except ValueError:
            continue
        result.conforming = validator.is_valid(value) and value.get("rid") == result.rid


def summarize(level: Level) -> dict[str, Any]:
    """The level's row: counts, conformance, latency/ttfb percentiles (ms), throughput."""
    results = level.results
    ok = [r for r in results if r.error is None]
    # every request counts, errors too: a proxy's retries before its error are time
    # the client waited
    latencies = [r.latency * 1000 for r in results if not math.isnan(r.latency)]
    ttfbs = [r.ttfb * 1000 for r in results if r.ttfb is not None]
    errors = Counter(r.error for r in results if r.error is not None)
    attempts = [r.jsonmode.get("attempts", 1) for r in ok if isinstance(r.jsonmode, dict)]
    n = len(results)
    return {
        "side": level.side,
        "concurrency": level.concurrency,
        "stream": level.stream,
        "requests": n,
        "ok": len(ok),
        "conforming": sum(r.conforming for r in results),
        "conformance": (sum(r.conforming for r in results) / n) if n else math.nan,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "mean_ms": (sum(latencies) / len(latencies)) if latencies else math.nan,
        "ttfb_p50_ms": percentile(ttfbs, 50) if level.stream else None,
        "ttfb_p99_ms": percentile(ttfbs, 99) if level.stream else None,
        "rps": n / level.wall if level.wall > 0 else math.nan,
        "wall_s": level.wall,
        "errors": dict(errors),
        "mean_attempts": (sum(attempts) / len(attempts)) if attempts else None,
    }
