"""jsonmode serve beside LiteLLM's proxy on the same scripted upstream, in one run.

    python bench/serve.py                      # levels 1, 50, 200; 10 000-request integrity run
    python bench/serve.py --quick              # short: fewer requests, 1 000-request integrity run
    python bench/serve.py --json out.json      # also write every number
    python bench/serve.py --profile DIR        # sample the proxies' stacks (not for timing)

Three sides answer the same requests (``response_format`` json_schema, plain and
streamed) at 1, 50 and 200 concurrent clients:

* ``direct``: the scripted upstream itself (bench/serve_upstream.py: asyncio, a fixed
  reply delay, replies that slip deterministically by request id);
* ``jsonmode``: ``python -m jsonmode.cli serve --upstream openai/bench --api-base
  <upstream> --port 0 --mode repair`` from this tree;
* ``litellm``: LiteLLM's proxy (``litellm[proxy]`` in its own virtual environment,
  created with pip if missing; ``--litellm-venv`` points at another), the upstream
  as an ``openai/`` model, ``litellm_settings.enable_json_schema_validation: true``.

Added latency is a side's percentile minus the direct side's at the same
concurrency and mode. Conformance: the reply's content parses, validates against
the schema and carries the request's own id. The integrity run sends ``--integrity``
requests (half streamed) at the top concurrency to jsonmode serve and counts lost,
duplicated and mixed-up replies. See bench/README.md ("Serve") for how to read it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from serve_load import Level, check, integrity, run_level, summarize  # noqa: E402
from serve_upstream import SCHEMA  # noqa: E402

RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "item", "schema": SCHEMA, "strict": True},
}
DEFAULT_VENV = Path("/work/litellm-proxy-venv")
SERVING = re.compile(r"serving on http://[\d.]+:(\d+)")
LISTENING = re.compile(r"listening on (\d+)")
LITELLM_CONFIG = """\
model_list:
  - model_name: bench
    litellm_params:
      model: openai/bench
      api_base: {api_base}
      api_key: sk-bench
litellm_settings:
  enable_json_schema_validation: true
  drop_params: true
  telemetry: false
general_settings:
  master_key: {key}
"""
#: both proxies check a bearer key (LiteLLM refuses to start without a master key)
KEYS = {
    "jsonmode": "sk-bench-jsonmode-0123456789abcdef",
    "litellm": "sk-bench-litellm-0123456789abcdef",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A child process whose stdout and stderr go to a log file (never a full pipe)."""

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = logdir / f"{name}.log"
        self._file = self.log.open("wb")
        self.proc = subprocess.Popen(
            argv, stdout=self._file, stderr=subprocess.STDOUT, env=env, cwd=ROOT
        )

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = pattern.search(self.log.read_text(errors="replace"))
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not start:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self, grace: float = 20.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._file.close()


def wait_http(url: str, timeout: float, child: Child) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{child.name}: {url} never answered 200:\n{child.tail()}")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def ensure_litellm(venv: Path) -> Path:
    """The ``litellm`` proxy executable in ``venv``, installing ``litellm[proxy]`` if absent."""
    exe = venv / "bin" / "litellm"
    if exe.exists():
        return exe
    print(f"creating {venv} with litellm[proxy] (once; a few minutes)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "litellm[proxy]"], check=True)
    return exe


def litellm_version(venv: Path) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m;"
         "print(m.version('litellm'))"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() or "?"


@contextlib.contextmanager
def sides(args: argparse.Namespace, logdir: Path) -> Iterator[dict[str, Any]]:
    """Start the upstream and the proxies; yield their base URLs (and children)."""
    env = dict(os.environ)
    env.setdefault("OPENAI_API_KEY", "sk-bench")
    children: list[Child] = []
    try:
        upstream = Child(
            "upstream",
            [sys.executable, str(HERE / "serve_upstream.py"), "--delay", str(args.delay)],
            logdir,
            env,
        )
        children.append(upstream)
        up_port = int(upstream.wait_for(LISTENING, 30).group(1))
        up_base = f"http://127.0.0.1:{up_port}"
        urls: dict[str, Any] = {"direct": up_base, "upstream": up_base}
        if "jsonmode" in args.sides:
            serve_argv = ["-m", "jsonmode.cli", "serve", "--upstream", "openai/bench"]
            serve_argv += ["--api-base", f"{up_base}/v1", "--port", "0", "--mode", args.mode]
            serve_argv += ["--api-key-env", "BENCH_SERVE_KEY"]
            if args.workers > 1:
                serve_argv += ["--workers", str(args.workers)]
            jenv = dict(env)
            jenv["BENCH_SERVE_KEY"] = KEYS["jsonmode"]
            jenv["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
            )
            if args.profile:
                out = args.profile / "jsonmode.txt"
                argv = [sys.executable, str(HERE / "serve_profile.py"), str(out), *serve_argv]
            else:
                argv = [sys.executable, *serve_argv]
            jsonmode = Child("jsonmode", argv, logdir, jenv)
            children.append(jsonmode)
            port = int(jsonmode.wait_for(SERVING, 60).group(1))
            urls["jsonmode"] = f"http://127.0.0.1:{port}"
            wait_http(f"{urls['jsonmode']}/healthz", 60, jsonmode)
        if "litellm" in args.sides:
            exe = ensure_litellm(args.litellm_venv)
            config = logdir / "litellm.yaml"
            config.write_text(LITELLM_CONFIG.format(api_base=f"{up_base}/v1", key=KEYS["litellm"]))
            port = free_port()
            lenv = dict(env)
            lenv.update(
                LITELLM_LOCAL_MODEL_COST_MAP="True",
                LITELLM_LOG="ERROR",
                LITELLM_TELEMETRY="False",
                DISABLE_ADMIN_UI="True",
                NO_DOCS="True",
            )
            lenv.pop("PYTHONPATH", None)
            argv = [str(exe), "--config", str(config), "--host", "127.0.0.1"]
            if args.profile:
                out = args.profile / "litellm.txt"
                python = str(args.litellm_venv / "bin" / "python")
                argv = [python, str(HERE / "serve_profile.py"), str(out), *argv]
            argv += ["--port", str(port), "--num_workers", "1"]
            litellm = Child("litellm", argv, logdir, lenv)
            children.append(litellm)
            urls["litellm"] = f"http://127.0.0.1:{port}"
            wait_http(f"{urls['litellm']}/health/liveliness", 180, litellm)
        urls["children"] = {c.name: c for c in children}
        yield urls
    finally:
        for child in reversed(children):
            child.stop()


def cpu_seconds(root: int) -> float:
    """User + system CPU seconds of process ``root`` and its live descendants (Linux /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    total = 0.0
    for pid, (_, cpu) in stats.items():
        walk = pid
        while walk > 1 and walk != root and walk in stats:
            walk = stats[walk][0]
        if walk == root:
            total += cpu
    return total


def upstream_calls(base: str) -> int:
    return int(get_json(f"{base}/stats")["calls"])


async def measure(
    base: str, side: str, n: int, concurrency: int, stream: bool, prefix: str
) -> Level:
    return await run_level(
        f"{base}/v1/chat/completions",
        side=side,
        n=n,
        concurrency=concurrency,
        stream=stream,
        prefix=prefix,
        response_format=RESPONSE_FORMAT,
        api_key=KEYS.get(side),
    )


def run_matrix(args: argparse.Namespace, urls: dict[str, Any]) -> list[dict[str, Any]]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(SCHEMA)
    order = ["direct", *[s for s in ("jsonmode", "litellm") if s in args.sides]]
    for side in order:  # warm-up: connections, imports, caches
        for stream in (False, True):
            asyncio.run(measure(urls[side], side, 20, 10, stream, f"warm-{side}-{int(stream)}"))
    if args.profile:  # the samplers start counting now, start-up and warm-up left out
        for name in ("jsonmode", "litellm"):
            if name in urls["children"]:
                urls["children"][name].proc.send_signal(signal.SIGUSR1)
    rows: list[dict[str, Any]] = []
    for concurrency, n in zip(args.levels, args.requests, strict=True):
        for stream in (False, True):
            for side in order:
                before = upstream_calls(urls["upstream"])
                child = urls["children"].get(side if side != "direct" else "upstream")
                cpu_before = cpu_seconds(child.proc.pid)
                prefix = f"{side}-c{concurrency}-{'s' if stream else 'p'}"
                level = asyncio.run(measure(urls[side], side, n, concurrency, stream, prefix))
                calls = upstream_calls(urls["upstream"]) - before
                cpu = cpu_seconds(child.proc.pid) - cpu_before
                check(level, validator)
                row = summarize(level)
                row["cpu_ms_per_request"] = cpu * 1000 / n
                row["upstream_calls_per_request"] = calls / n
                rows.append(row)
                print(short(row), file=sys.stderr, flush=True)
    direct = {(r["concurrency"], r["stream"]): r for r in rows if r["side"] == "direct"}
    for row in rows:
        base = direct[(row["concurrency"], row["stream"])]
        for key in ("p50_ms", "p99_ms", "ttfb_p50_ms", "ttfb_p99_ms"):
            if row.get(key) is not None and base.get(key) is not None:
                row["added_" + key] = row[key] - base[key]
    return rows


def run_integrity(args: argparse.Namespace, urls: dict[str, Any]) -> dict[str, Any]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(SCHEMA)
    concurrency = max(args.levels)
    half = args.integrity // 2
    before = upstream_calls(urls["upstream"])
    report: dict[str, Any] = {"concurrency": concurrency}
    sent: list[str] = []
    received: list[str | None] = []
    conforming = 0
    errors: dict[str, int] = {}
    for stream, n in ((False, args.integrity - half), (True, half)):
        level = asyncio.run(
            measure(urls["jsonmode"], "jsonmode", n, concurrency, stream, f"int-{int(stream)}")
        )
        check(level, validator)
        sent += [r.rid for r in level.results]
        received += [r.got_rid for r in level.results]
        conforming += sum(r.conforming for r in level.results)
        for r in level.results:
            if r.error is not None:
                errors[r.error] = errors.get(r.error, 0) + 1
    report.update(integrity(sent, received))
    report["conforming"] = conforming
    report["errors"] = errors
    report["upstream_calls"] = upstream_calls(urls["upstream"]) - before
    return report


def fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def short(row: dict[str, Any]) -> str:
    mode = "stream" if row["stream"] else "plain"
    return (
        f"{row['side']:>8} c={row['concurrency']:<3} {mode:6} n={row['requests']} "
        f"conform={row['conformance']:.1%} p50={fmt(row['p50_ms'])}ms "
        f"p99={fmt(row['p99_ms'])}ms rps={fmt(row['rps'], 0)} errors={row['errors']}"
    )


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| side | clients | mode | n | conform | p50 ms | p99 ms | added p50 | added p99 "
        "| TTFB p50 | rps | CPU ms/req | upstream calls/req | errors |\n"
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    )
    lines = []
    for r in rows:
        errors = ", ".join(f"{k} ×{v}" for k, v in sorted(r["errors"].items())) or ""
        lines.append(
            f"| {r['side']} | {r['concurrency']} | {'stream' if r['stream'] else 'plain'} "
            f"| {r['requests']} | {r['conformance']:.1%} | {fmt(r['p50_ms'])} "
            f"| {fmt(r['p99_ms'])} | {fmt(r.get('added_p50_ms'))} | {fmt(r.get('added_p99_ms'))} "
            f"| {fmt(r.get('ttfb_p50_ms'))} | {fmt(r['rps'], 0 if r['rps'] >= 10 else 1)} "
            f"| {fmt(r['cpu_ms_per_request'], 2)} "
            f"| {fmt(r['upstream_calls_per_request'], 2)} | {errors} |"
        )
    return head + "\n".join(lines)


def ratios(rows: list[dict[str, Any]]) -> str:
    by = {(r["side"], r["concurrency"], r["stream"]): r for r in rows}
    keys = [(c, s) for (side, c, s) in by if side == "jsonmode" and ("litellm", c, s) in by]
    if not keys:
        return ""
    out = [
        "| clients | mode | conform j / l | p50 j/l | p99 j/l | added p50 j/l (ms) "
        "| added p99 j/l (ms) | rps j/l |",
        "|---:|---|---|---:|---:|---|---|---:|",
    ]
    for c, s in keys:
        j, lit = by[("jsonmode", c, s)], by[("litellm", c, s)]

        def ratio(key: str, j: dict[str, Any] = j, lit: dict[str, Any] = lit) -> str:
            a, b = j.get(key), lit.get(key)
            if not a or not b or math.isnan(a) or math.isnan(b):
                return "–"
            return f"{a / b:.2f}"

        out.append(
            f"| {c} | {'stream' if s else 'plain'} "
            f"| {j['conformance']:.1%} / {lit['conformance']:.1%} | {ratio('p50_ms')} "
            f"| {ratio('p99_ms')} | {fmt(j.get('added_p50_ms'))} / {fmt(lit.get('added_p50_ms'))} "
            f"| {fmt(j.get('added_p99_ms'))} / {fmt(lit.get('added_p99_ms'))} | {ratio('rps')} |"
        )
    return "\n".join(out)


def targets(rows: list[dict[str, Any]], report: dict[str, Any]) -> list[str]:
    """Issue 42's targets, each as 'met' or 'MISSED' with the measured value."""
    out = []
    mine = [r for r in rows if r["side"] == "jsonmode"]
    if mine:
        worst = min(r["conformance"] for r in mine)
        out.append(
            f"conformance 100 % on every jsonmode row: {worst:.1%} lowest — "
            + ("met" if worst == 1.0 else "MISSED")
        )
        top = max(r["concurrency"] for r in mine)
        for r in mine:
            if r["concurrency"] == top and r["stream"]:
                p50, p99 = r.get("added_p50_ms", math.nan), r.get("added_p99_ms", math.nan)
                out.append(
                    f"added p50 ≤ 2 ms at {top} streams: {p50:.1f} ms — "
                    + ("met" if p50 <= 2 else "MISSED")
                )
                out.append(
                    f"added p99 ≤ 10 ms at {top} streams: {p99:.1f} ms — "
                    + ("met" if p99 <= 10 else "MISSED")
                )
    if "integrity" in report:
        i = report["integrity"]
        bad = i["lost"] + i["duplicated"] + i["mixed"]
        out.append(
            f"0 lost/duplicated/mixed over {i['requests']}: {bad} — "
            + ("met" if bad == 0 else "MISSED")
        )
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="jsonmode serve beside LiteLLM's proxy on one scripted upstream."
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests (~1-2 min)")
    parser.add_argument("--levels", default="1,50,200", help="concurrent clients per level")
    parser.add_argument(
        "--requests",
        default=None,
        help="requests per level, comma-separated (default 100,500,1000; --quick 30,150,400)",
    )
    parser.add_argument(
        "--integrity", type=int, default=None, help="integrity-run requests (0: skip)"
    )
    parser.add_argument("--delay", type=float, default=0.02, help="upstream reply delay (s)")
    parser.add_argument("--sides", default="jsonmode,litellm", help="jsonmode,litellm or one")
    parser.add_argument("--mode", default="repair", help="jsonmode serve --mode")
    parser.add_argument("--workers", type=int, default=1, help="jsonmode serve --workers")
    parser.add_argument("--litellm-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument(
        "--profile", type=Path, help="sample the proxies' stacks into DIR/{jsonmode,litellm}.txt"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep the children's logs")
    args = parser.parse_args(argv)
    args.levels = [int(x) for x in args.levels.split(",")]
    default = "30,150,400" if args.quick else "100,500,1000"
    requests = [int(x) for x in (args.requests or default).split(",")]
    if len(requests) == 1:
        requests = requests * len(args.levels)
    if len(requests) != len(args.levels):
        parser.error("--requests needs one number, or one per level")
    args.requests = requests
    if args.integrity is None:
        args.integrity = 1000 if args.quick else 10_000
    args.sides = {s.strip() for s in args.sides.split(",") if s.strip()}
    if not args.sides <= {"jsonmode", "litellm"}:
        parser.error("--sides: jsonmode and/or litellm")
    if "jsonmode" not in args.sides:
        args.integrity = 0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    logdir = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    meta: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "delay_s": args.delay,
        "levels": args.levels,
        "requests": args.requests,
        "mode": args.mode,
        "workers": args.workers,
        # uvicorn picks these up when present: they change the server side's cost
        "jsonmode_env": {
            name: importlib.util.find_spec(name) is not None
            for name in ("uvloop", "httptools", "httpx_aiohttp")
        },
    }
    try:
        with sides(args, logdir) as urls:
            if "litellm" in args.sides:
                meta["litellm"] = litellm_version(args.litellm_venv)
            rows = run_matrix(args, urls)
            report: dict[str, Any] = {"meta": meta, "rows": rows}
            if args.integrity:
                report["integrity"] = run_integrity(args, urls)
        meta["loadavg_end"] = os.getloadavg()
    except RuntimeError as exc:
        print(f"bench/serve.py: {exc}", file=sys.stderr)
        print(f"logs kept in {logdir}", file=sys.stderr)
        return 1
    print(
        f"# jsonmode serve vs LiteLLM proxy — upstream delay {args.delay * 1000:.0f} ms, "
        f"load {meta['loadavg'][0]:.2f} → {meta['loadavg_end'][0]:.2f}, "
        f"{meta['cpus']} CPUs, litellm {meta.get('litellm', '–')}, jsonmode's environment "
        f"{', '.join(k for k, v in meta['jsonmode_env'].items() if v) or 'plain asyncio/h11'}\n"
    )
    print(table(rows))
    ratio_table = ratios(rows)
    if ratio_table:
        print("\nRatios jsonmode / LiteLLM (added latency: jsonmode / LiteLLM, in ms):\n")
        print(ratio_table)
    if "integrity" in report:
        i = report["integrity"]
        print(
            f"\nIntegrity (jsonmode, {i['requests']} requests at {i['concurrency']} clients, "
            f"half streamed): lost {i['lost']}, duplicated {i['duplicated']}, "
            f"mixed {i['mixed']}, conforming {i['conforming']}/{i['requests']}, "
            f"upstream calls {i['upstream_calls']}, errors {i['errors'] or 0}"
        )
    met = targets(rows, report)
    if met:
        print("\nTargets (issue 42):\n" + "\n".join(f"- {line}" for line in met))
    report["targets"] = met
    if args.profile:
        print(f"\nstack samples of the proxies: {args.profile}/")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))
    if args.keep_logs:
        print(f"\nlogs: {logdir}")
    else:
        shutil.rmtree(logdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
