"""``jsonmode serve`` as real processes: drain on SIGTERM, client disconnects, several
workers with summed metrics, flat memory, and what it keeps to itself (keys, CORS, the
loopback address).

Each server is the real command (``python -m jsonmode.cli serve --port 0``) in front of
the scripted upstream (tests/support/openai_server.py); servers are shared per module
where the tests allow it (a start costs about a second, a second worker more), and each
test scripts the upstream actions it asks for.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from support.openai_server import Delay, HttpError, OpenAIServer, Reply
from support.serve_process import ServeProcess

from jsonmode.errors import UsageError
from jsonmode.serve import runner
from jsonmode.serve.config import ServeConfig

pytestmark = pytest.mark.integration

READY = re.compile(r"jsonmode serve: serving on (http://\S+)")
UPSTREAM_KEY = "sk-upstream-d41d8cd98f00b204e980"
SERVER_KEY = "jm-server-key-5f4dcc3b5aa765d61d83"
SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}
CONFORMING = '{"a": 1}'
CLOSE = {"Connection": "close"}
#: Seconds a server may take to print its address (imports; a worker is a new interpreter).
START_S = 60.0


def chat_body(text: str = "give a", name: str = "thing") -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": text}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": SCHEMA, "strict": True},
        },
    }


class Served(ServeProcess):
    """``jsonmode serve`` as a child process in front of its own scripted upstream
    (``upstream``), with the upstream's key; :meth:`wait_ready` before use."""

    def __init__(self, *flags: str, env: dict[str, str | None] | None = None) -> None:
        self.upstream = upstream = OpenAIServer()
        super().__init__(
            *("--upstream", "openai/m", "--api-base", upstream.base_url),
            *("--upstream-key-env", "UPSTREAM_KEY", *flags),
            env={"UPSTREAM_KEY": UPSTREAM_KEY, "PROMETHEUS_MULTIPROC_DIR": None, **(env or {})},
            start_limit=START_S,
            wait=False,
        )

    def rss_kib(self) -> int:
        status = pathlib_read(f"/proc/{self.process.pid}/status")
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]

    def close(self, sig: int = signal.SIGTERM) -> int:
        status = super().close(sig)
        self.upstream.close()
        return status


def pathlib_read(path: str) -> str:
    with open(path, encoding="ascii") as file:
        return file.read()


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of ``name`` (labels, value) in a Prometheus text exposition."""
    found = []
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
            found.append((labels, float(match.group(2))))
    return found


def tcp_states(port: int) -> list[str]:
    """The TCP states (/proc/net/tcp codes: 01 established, 08 close-wait, 0A listen)
    of the sockets whose local port is ``port``, with their local address in hex."""
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for row in pathlib_read(table).splitlines()[1:]:
            fields = row.split()
            address, local_port = fields[1].split(":")
            if int(local_port, 16) == port:
                states.append(f"{address}:{fields[3]}")
    return states


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def fleet() -> Iterator[dict[str, Served]]:
    """Every server of the module, started at once (their imports overlap): ``plain``
    (one worker, shared), ``guarded`` (--api-key-env), ``workers`` (--workers 2) and
    ``drain`` (--drain 3, stopped by its test). Each test scripts its upstream."""
    servers: dict[str, Served] = {}
    try:
        servers["plain"] = Served()
        servers["guarded"] = Served(
            "--api-key-env", "SERVER_KEY", "--access-log", env={"SERVER_KEY": SERVER_KEY}
        )
        servers["workers"] = Served("--workers", "2")
        servers["drain"] = Served("--drain", "3")
        for served in servers.values():
            served.wait_ready()
        yield servers
    finally:
        statuses = {
            name: served.close(signal.SIGINT if name == "guarded" else signal.SIGTERM)
            for name, served in servers.items()
        }
    # Ctrl+C (SIGINT) drains and exits 0 as SIGTERM does
    assert statuses == dict.fromkeys(servers, 0)


# -- one worker, shared: disconnects, memory, what it keeps to itself ---------------------


@pytest.fixture(scope="module")
def plain(fleet: dict[str, Served]) -> Served:
    return fleet["plain"]


@pytest.fixture(scope="module")
def upstream(plain: Served) -> OpenAIServer:
    return plain.upstream


def test_binds_loopback_by_default(plain: Served) -> None:
    assert plain.url.startswith("http://127.0.0.1:")
    listening = [state for state in tcp_states(plain.port) if state.endswith(":0A")]
    assert listening == ["0100007F:0A"]  # 127.0.0.1 only, not 0.0.0.0 (00000000)


def test_a_client_that_leaves_cancels_the_upstream_call(
    plain: Served, upstream: OpenAIServer
) -> None:
    """The client closes its connection while the upstream is still thinking: the
    server closes its upstream connection at once (the upstream's socket goes to
    CLOSE_WAIT, long before the 30 s reply), nothing stays in flight, and the next
    request is served."""
    upstream.add(Delay(30.0, Reply(CONFORMING)), Reply(CONFORMING))
    before = upstream.request_count
    payload = json.dumps(chat_body()).encode()
    host, port = "127.0.0.1", plain.port
    with socket.create_connection((host, port), timeout=5) as client:
        client.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        wait_for(lambda: upstream.request_count == before + 1, 10, "the upstream call")
        wait_for(
            lambda: any(s.endswith(":01") for s in tcp_states(upstream.port)),
            5,
            "the upstream connection",
        )
    left = time.monotonic()
    wait_for(
        lambda: not any(s.endswith(":01") for s in tcp_states(upstream.port)),
        3,
        "the upstream connection to be closed by the server",
    )
    assert time.monotonic() - left < 3
    metrics = httpx.get(plain.url + "/metrics", timeout=10).text
    assert metric_samples(metrics, "jsonmode_serve_in_flight") == [({}, 1.0)]  # the scrape
    reply = httpx.post(plain.url + "/v1/chat/completions", json=chat_body(), timeout=10)
    assert reply.status_code == 200
    assert json.loads(reply.json()["choices"][0]["message"]["content"]) == {"a": 1}
    assert upstream.remaining == 0


def test_memory_stays_flat(plain: Served, upstream: OpenAIServer) -> None:
    """1 000 structured requests of 16 KiB each: the server's RSS after all of them is
    within 6 MiB of its RSS after the first 100 (measured: under 1 MiB; a server that
    kept every request's body would grow by 14 MiB or more)."""
    total, warm = 1000, 100
    upstream.add(*[Reply(CONFORMING)] * total)
    body = chat_body("give a " + "x" * 16_384)

    def send(count: int) -> None:
        def one(_: int) -> int:
            return client.post(plain.url + "/v1/chat/completions", json=body).status_code

        with ThreadPoolExecutor(4) as pool:
            statuses = list(pool.map(one, range(count)))
        assert statuses == [200] * count

    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=4)) as client:
        send(warm)
        after_warmup = plain.rss_kib()
        send(total - warm)
        after_all = plain.rss_kib()
    assert upstream.remaining == 0
    assert after_all - after_warmup < 6 * 1024, (after_warmup, after_all)


def test_a_port_in_use_is_a_usage_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"cannot listen on 127.0.0.1:{port}"):
            runner.serve(ServeConfig("openai/m", port=port))


def test_no_cors_headers_unless_configured(plain: Served) -> None:
    origin = {"Origin": "https://elsewhere.example"}
    got = httpx.get(plain.url + "/v1/models", headers=origin, timeout=10)
    assert got.status_code == 200
    preflight = httpx.options(
        plain.url + "/v1/chat/completions",
        headers={**origin, "Access-Control-Request-Method": "POST"},
        timeout=10,
    )
    for reply in (got, preflight):
        assert not [name for name in reply.headers if name.lower().startswith("access-control")]


def test_metric_labels_carry_no_user_text(plain: Served, upstream: OpenAIServer) -> None:
    upstream.add(Reply(CONFORMING))
    name = "customer_7731_private"
    reply = httpx.post(
        plain.url + "/v1/chat/completions?q=secret-query",
        json=chat_body("secret prompt text", name=name),
        timeout=10,
    )
    assert reply.status_code == 200
    missing = httpx.get(plain.url + "/v1/secret-path-4412", timeout=10)
    assert missing.status_code == 404
    metrics = httpx.get(plain.url + "/metrics", timeout=10).text
    for text in (name, "secret", UPSTREAM_KEY):
        assert text not in metrics
    answered = metric_samples(metrics, "jsonmode_serve_requests_total")
    routes = {labels["route"] for labels, _ in answered}
    assert "other" in routes
    assert upstream.remaining == 0


# -- the server's own key -----------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(fleet: dict[str, Served]) -> Served:
    return fleet["guarded"]


@pytest.fixture(scope="module")
def guarded_upstream(guarded: Served) -> OpenAIServer:
    return guarded.upstream


def test_a_missing_or_wrong_key_is_401_and_never_reaches_the_upstream(
    guarded: Served, guarded_upstream: OpenAIServer
) -> None:
    url = guarded.url + "/v1/chat/completions"
    wrong = [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {SERVER_KEY[:-1]}"},
        {"Authorization": f"Bearer {SERVER_KEY}x"},
        {"Authorization": SERVER_KEY},
        {"Authorization": f"Basic {SERVER_KEY}"},
    ]
    for headers in wrong:
        reply = httpx.post(url, json=chat_body(), headers=headers, timeout=10)
        assert reply.status_code == 401, headers
        assert reply.json()["error"]["type"] == "authentication_error"
        assert SERVER_KEY not in reply.text
    assert httpx.get(guarded.url + "/metrics", timeout=10).status_code == 401
    assert guarded_upstream.request_count == 0
    assert httpx.get(guarded.url + "/healthz", timeout=10).status_code == 200


def test_keys_never_leak(guarded: Served, guarded_upstream: OpenAIServer) -> None:
    """The upstream gets its own key (and never the server's); neither key is in a reply,
    an error, /metrics or the server's logs (its access log on)."""
    auth = {"Authorization": f"Bearer {SERVER_KEY}"}
    guarded_upstream.add(
        Reply(CONFORMING), HttpError(401, "Incorrect API key provided", "invalid_request_error")
    )
    before = guarded_upstream.request_count
    url = guarded.url + "/v1/chat/completions"
    good = httpx.post(url, json=chat_body(), headers=auth, timeout=10)
    assert good.status_code == 200
    refused = httpx.post(url, json=chat_body(), headers=auth, timeout=10)
    assert refused.status_code >= 400
    metrics = httpx.get(guarded.url + "/metrics", headers=auth, timeout=10)
    assert metrics.status_code == 200
    sent = guarded_upstream.recorded[before:]
    assert [item.headers.get("authorization") for item in sent] == [f"Bearer {UPSTREAM_KEY}"] * 2
    assert all(SERVER_KEY not in json.dumps(item.headers) for item in sent)
    wait_for(lambda: "GET /metrics" in guarded.stdout, 5, "the access log")
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in guarded.stdout
    logs = guarded.stdout + guarded.stderr
    for text in (good.text, str(good.headers), refused.text, metrics.text, logs):
        assert UPSTREAM_KEY not in text
        assert SERVER_KEY not in text


# -- SIGTERM --------------------------------------------------------------------------------


def test_sigterm_drains_in_flight_requests_and_refuses_new_ones(
    fleet: dict[str, Served],
) -> None:
    """Two requests in flight at SIGTERM: the one that ends within --drain 3 is answered
    200; new connections are refused at once; the one that would take 60 s is cut at the
    drain's end; the process exits 0 within the drain (plus the app's shutdown)."""
    served = fleet["drain"]
    up = served.upstream
    up.add(Delay(1.5, Reply(CONFORMING)), Delay(60.0, Reply(CONFORMING)))
    results: dict[str, Any] = {}

    def ask(name: str) -> None:
        try:
            url = served.url + "/v1/chat/completions"
            reply = httpx.post(url, json=chat_body(), timeout=30)
            results[name] = reply.status_code
        except httpx.HTTPError as exc:
            results[name] = type(exc).__name__

    quick = threading.Thread(target=ask, args=("quick",))
    quick.start()
    wait_for(lambda: up.request_count == 1, 10, "the first upstream call")
    slow = threading.Thread(target=ask, args=("slow",))
    slow.start()
    wait_for(lambda: up.request_count == 2, 10, "the second upstream call")
    signalled = time.monotonic()
    served.process.send_signal(signal.SIGTERM)

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", served.port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        return False

    wait_for(refused, 2.0, "new connections to be refused")
    assert served.process.poll() is None  # still draining
    status = served.process.wait(10)
    took = time.monotonic() - signalled
    quick.join(10)
    slow.join(10)
    assert served.close() == status == 0
    assert results["quick"] == 200
    assert results["slow"] != 200
    assert 2.5 < took < 3 + 4.0, took  # the drain, then the app's shutdown (a loaded CI)


# -- several workers --------------------------------------------------------------------------


def test_two_workers_answer_and_metrics_sum_over_both(fleet: dict[str, Served]) -> None:
    """--workers 2: the requests are spread over two worker processes (children of the
    server), and /metrics, asked of whichever worker, sums both: every counter equals the
    number of requests sent, though each worker answered only some."""
    served = fleet["workers"]
    up = served.upstream
    up.add(*[Reply(CONFORMING)] * 320)
    sent = scrapes = 0
    per_worker: dict[str, float] = {}

    def one(_: int) -> int:
        # a new connection each time: the kernel hands each to either worker
        url = served.url + "/v1/chat/completions"
        return client.post(url, json=chat_body(), headers=CLOSE).status_code

    with ThreadPoolExecutor(8) as pool, httpx.Client(timeout=30) as client:
        while sent < 320:
            assert list(pool.map(one, range(40))) == [200] * 40
            sent += 40
            text = httpx.get(served.url + "/metrics", timeout=10).text
            scrapes += 1
            samples = metric_samples(text, "jsonmode_serve_worker_requests")
            per_worker = {labels["pid"]: value for labels, value in samples}
            # a scrape is counted once answered: a worker that answered as many
            # requests as there were scrapes answered a chat request
            if len([value for value in per_worker.values() if value >= scrapes]) >= 2:
                break
    assert len(per_worker) == 2, per_worker
    assert all(value >= scrapes for value in per_worker.values()), per_worker
    # + 1: the /healthz that wait_ready got its first 200 from; - 1: the scrape being
    # answered is counted once it is answered
    assert sum(per_worker.values()) == sent + scrapes
    for pid in per_worker:
        stat = pathlib_read(f"/proc/{pid}/stat")
        assert int(stat.rsplit(")", 1)[1].split()[1]) == served.process.pid
    text = httpx.get(served.url + "/metrics", timeout=10).text
    answered = metric_samples(text, "jsonmode_serve_requests_total")
    chat = [v for labels, v in answered if labels["route"] == "/v1/chat/completions"]
    assert chat == [sent]
    jsonmode_requests = metric_samples(text, "jsonmode_requests_total")
    assert sum(value for _, value in jsonmode_requests) == sent
    assert up.request_count == sent
