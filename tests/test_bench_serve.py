"""bench/serve.py's pure parts: percentiles, the upstream's slips, the integrity check.

Fast (no servers, no LiteLLM): the parts whose mistakes would make the benchmark's
table wrong without making it fail.
"""

import asyncio
import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import serve_load  # noqa: E402
import serve_upstream  # noqa: E402
from serve_load import Level, Result, integrity, percentile, reply_rid, summarize  # noqa: E402
from serve_upstream import (  # noqa: E402
    REPAIRABLE,
    SCHEMA,
    SLIPS,
    document_for,
    reply_text,
    request_key,
    slip_for,
)

import jsonmode  # noqa: E402


def test_percentile_interpolates_between_ranks_like_numpy():
    values = list(range(1, 101))  # 1..100
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile(values, 0) == 1
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7.0
    assert percentile([3, 1, 2], 50) == 2  # unsorted input


def test_percentile_of_nothing_is_nan():
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_slips_are_deterministic_by_request_id_and_cover_every_kind():
    rids = [f"r-{i}" for i in range(2000)]
    first = [reply_text(rid) for rid in rids]
    again = [reply_text(rid) for rid in rids]
    assert first == again
    counts = Counter(slip for slip, _ in first)
    assert set(counts) == {slip for slip, _ in SLIPS}
    for slip, share in SLIPS:  # shares within a few points of the table
        assert abs(counts[slip] / len(rids) * 100 - share) < 4, (slip, counts)


def test_each_slip_breaks_the_reply_the_way_it_says_and_a_reask_is_clean():
    validator = Draft202012Validator(SCHEMA)
    seen = set()
    for i in range(500):
        rid = f"s-{i}"
        slip, text = reply_text(rid)
        seen.add(slip)
        if slip == "clean":
            assert json.loads(text) == document_for(rid)
            assert validator.is_valid(json.loads(text))
        elif slip in ("wrong_type", "missing_field"):
            assert not validator.is_valid(json.loads(text))
        else:  # repairable syntax: not JSON as sent
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)
        # jsonmode's own repair recovers the repairable ones, exactly
        if slip in REPAIRABLE:
            assert jsonmode.parse(text, SCHEMA, mode="repair").value == document_for(rid)
        # a re-ask (attempt 1) always gets the clean document
        assert reply_text(rid, 1) == ("clean", json.dumps(document_for(rid)))
    assert seen == {slip for slip, _ in SLIPS}


def test_the_upstream_keys_replies_by_the_first_user_rid_and_counts_reasks():
    body = {
        "messages": [
            {"role": "system", "content": "Answer with JSON. rid=not-this-one"},
            {"role": "user", "content": "Describe the item rid=abc-17 as JSON."},
            {"role": "assistant", "content": '{"rid": "abc-17"'},
            {"role": "user", "content": [{"type": "text", "text": "fix it rid=zzz"}]},
        ]
    }
    assert request_key(body) == ("abc-17", 1)
    assert request_key({"messages": []}) == (None, 0)


def test_integrity_counts_lost_duplicated_and_mixed_up_replies():
    sent = ["a", "b", "c", "d"]
    assert integrity(sent, ["a", "b", "c", "d"]) == {
        "requests": 4,
        "lost": 0,
        "duplicated": 0,
        "mixed": 0,
    }
    swapped = integrity(sent, ["b", "a", "c", "d"])
    assert swapped["mixed"] == 2
    assert swapped["duplicated"] == 0
    duplicated = integrity(sent, ["a", "a", "c", "d"])  # b's reply is a's, again
    assert duplicated["duplicated"] == 1
    assert duplicated["mixed"] == 1
    lost = integrity(sent, ["a", None, "c", "d"])
    assert lost["lost"] == 1
    assert lost["mixed"] == lost["duplicated"] == 0
    with pytest.raises(ValueError, match="one received entry per sent request"):
        integrity(sent, ["a"])


def test_reply_rid_reads_the_field_even_from_a_reply_that_is_not_json():
    assert reply_rid('{"rid": "x-1", "name": "n"}') == "x-1"
    assert reply_rid('```json\n{"rid": "x-2",}\n```') == "x-2"
    assert reply_rid("no id here") is None
    assert reply_rid(None) is None


def test_summarize_counts_errors_in_latency_and_conformance_against_all_requests():
    ok = Result("a", status=200, latency=0.010, content='{"rid": "a"}', conforming=True)
    bad = Result("b", status=500, latency=0.030, error="http 500: x")
    row = summarize(Level("jsonmode", 1, False, wall=0.5, results=[ok, bad]))
    assert row["conformance"] == 0.5
    assert row["p50_ms"] == pytest.approx(20.0)
    assert row["errors"] == {"http 500: x": 1}
    assert row["rps"] == pytest.approx(4.0)


def test_load_generator_against_the_scripted_upstream_end_to_end():
    """A real (small) level: the asyncio upstream answers, the slips arrive as sent."""

    async def scenario():
        upstream = serve_upstream.Upstream(delay=0.0)
        server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        fmt = {"type": "json_schema", "json_schema": {"name": "item", "schema": SCHEMA}}
        try:
            levels = [
                await serve_load.run_level(
                    url,
                    side="direct",
                    n=40,
                    concurrency=8,
                    stream=stream,
                    prefix=f"e{int(stream)}",
                    response_format=fmt,
                )
                for stream in (False, True)
            ]
        finally:
            server.close()
            await server.wait_closed()
        return upstream, levels

    upstream, levels = asyncio.run(scenario())
    validator = Draft202012Validator(SCHEMA)
    assert upstream.calls == 80
    for level in levels:
        serve_load.check(level, validator)
        for result in level.results:
            assert result.error is None
            assert result.got_rid == result.rid
            assert result.conforming == (slip_for(result.rid) == "clean")
            assert result.content == reply_text(result.rid)[1]
        if level.stream:
            assert all(r.ttfb is not None and r.ttfb <= r.latency for r in level.results)
        sent = [r.rid for r in level.results]
        assert integrity(sent, [r.got_rid for r in level.results])["mixed"] == 0
