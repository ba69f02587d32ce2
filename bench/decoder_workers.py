"""The decoder benchmark's processes: one worker per engine, driven by lanes in the parent.

Part of ``bench/decoder.py`` (see its docstring). :func:`worker_main` is the child: one
engine set up once, then schemas compiled and walked on request, every result sent
back over a pipe as it comes. :func:`drive` is the parent's side of one lane: it feeds
an engine's pending schemas to a :class:`Worker`, kills it on a compile or walk
timeout (then starts another), and records the results in the engine's
:class:`EngineRun`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import multiprocessing
import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decoder_engines import ENGINE_CLASSES, CompileFailure, _walk, now_ns
from decoder_sample import TOKENIZER_DIR, Case

PACKAGES = {
    "jsonmode": "jsonmode",
    "xgrammar": "xgrammar",
    "xgrammar-compliant": "xgrammar",
    "llguidance": "llguidance",
    "outlines": "outlines-core",
}
MODULES = {"outlines": "outlines_core", "xgrammar-compliant": "xgrammar"}
# The untimed walk of a valid instance in the order MaskBench lists it (when not schema order).
GIVEN_PASS = 0


# -- the worker: one engine in its own process ---------------------------------------------


def _memory_kb() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        import resource

        out["VmHWM"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def worker_main(
    conn: Any, name: str, eos: int, cap_s: float, mem_limit_gb: float, quiet: bool = False
) -> None:
    """One engine in its own process: set up once, then compile and walk schemas on request."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if quiet:  # native warnings (xgrammar prints one per unsupported keyword) go nowhere
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    if mem_limit_gb > 0:
        import resource

        limit = int(mem_limit_gb * 1024**3)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        engine = ENGINE_CLASSES[name]()
        # Import the engine's modules before the memory baseline (setup does the work).
        for module in {
            "jsonmode": ["jsonmode", "jsonmode.decoding.vocabulary", "numpy"],
            "xgrammar": ["xgrammar", "transformers"],
            "xgrammar-compliant": ["xgrammar", "transformers"],
            "llguidance": ["llguidance", "numpy"],
            "outlines": ["outlines_core", "outlines_core.json_schema", "numpy"],
        }[name]:
            __import__(module)
        started = time.perf_counter()
        if getattr(engine, "needs_transformers", False):
            import transformers

            transformers.logging.set_verbosity_error()
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
        else:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
        load_s = time.perf_counter() - started
        baseline = _memory_kb()
        started = time.perf_counter()
        engine.setup(tokenizer, eos)
        setup_s = time.perf_counter() - started
        after = _memory_kb()
        conn.send(
            (
                "ready",
                {
                    "setup_s": setup_s,
                    "tokenizer_load_s": load_s,
                    "rss_baseline_kb": baseline.get("VmRSS", 0),
                    "rss_after_setup_kb": after.get("VmRSS", 0),
                    "pid": os.getpid(),
                },
            )
        )
    except Exception:
        conn.send(("setup_error", traceback.format_exc(limit=6)))
        return
    while True:
        job = conn.recv()
        if job[0] == "stop":
            conn.send(("bye", _memory_kb()))
            return
        _, s_index, schema, tests, given = job
        started = now_ns()
        try:
            handle = engine.compile(schema)
        except CompileFailure as exc:
            conn.send(("compiled", s_index, exc.status, (now_ns() - started) / 1e9, str(exc), {}))
            conn.send(("done", s_index, {}, _memory_kb()))
            continue
        except Exception as exc:
            status = "crash" if name == "jsonmode" else "error"
            detail = f"{type(exc).__name__}: {exc}"
            if name == "jsonmode":
                detail += "\n" + traceback.format_exc(limit=8)
            conn.send(("compiled", s_index, status, (now_ns() - started) / 1e9, detail, {}))
            conn.send(("done", s_index, {}, _memory_kb()))
            continue
        elapsed = (now_ns() - started) / 1e9
        info = engine.compile_info(handle) if hasattr(engine, "compile_info") else {}
        conn.send(("compiled", s_index, "ok", elapsed, "", info))
        counters: dict[str, Any] = {}
        for pass_no in (1, 2):
            before = engine.counters(handle) if hasattr(engine, "counters") else None
            for t_index, valid, ids, text in tests:
                if pass_no == 2 and not valid:
                    continue
                try:
                    record = _walk(engine.walker(handle), ids, eos, cap_s)
                except Exception as exc:
                    record = {
                        "outcome": "error",
                        "position": -1,
                        "times": [],
                        "flags": {"exception": f"{type(exc).__name__}: {exc}"},
                    }
                    if name == "jsonmode":
                        record["flags"]["traceback"] = traceback.format_exc(limit=8)
                if (
                    name == "jsonmode"
                    and pass_no == 1
                    and valid
                    and record["outcome"] == "rejected"
                ):
                    try:
                        record["flags"]["accepts_text"] = engine.text_verdict(handle, text)
                        record["flags"]["accepts_text_any_order"] = engine.any_order_verdict(
                            schema, text
                        )
                    except Exception as exc:
                        record["flags"]["accepts_text_error"] = f"{type(exc).__name__}: {exc}"
                if not valid:
                    record["times"] = []  # mask time is measured on valid instances only
                conn.send(("instance", s_index, t_index, pass_no, record))
            if before is not None:
                after_counts = engine.counters(handle)
                counters[f"pass{pass_no}"] = {k: after_counts[k] - before[k] for k in before}
        for t_index, ids in given:  # valid instances as MaskBench lists them: untimed
            try:
                record = _walk(engine.walker(handle), ids, eos, cap_s)
                record = {"outcome": record["outcome"], "position": record["position"]}
            except Exception as exc:
                record = {"outcome": "error", "position": -1, "exception": repr(exc)}
            conn.send(("instance", s_index, t_index, GIVEN_PASS, record))
        del handle
        conn.send(("done", s_index, counters, _memory_kb()))


# -- the parent: one lane of engines, each in its own worker process ------------------------


@dataclass
class SchemaResult:
    status: str = "pending"  # ok | unsupported | invalid | budget | timeout | error | crash
    compile_s: float | None = None
    message: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    walk_timeout: bool = False


@dataclass
class EngineRun:
    name: str
    available: bool = True
    unavailable_reason: str = ""
    version: str = ""
    ready: dict[str, Any] = field(default_factory=dict)  # the first worker's setup report
    workers_started: int = 0
    peak_rss_kb: int = 0
    wall_s: float = 0.0
    schemas: dict[int, SchemaResult] = field(default_factory=dict)
    # (schema, test, pass) -> walk record; pass 1, 2 (warm caches) or GIVEN_PASS
    walks: dict[tuple[int, int, int], dict[str, Any]] = field(default_factory=dict)
    pending: deque[Case] = field(default_factory=deque)
    done: int = 0
    started_at: float | None = None
    last_report: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Worker:
    def __init__(self, name: str, args: argparse.Namespace, eos: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=worker_main,
            args=(child, name, eos, args.walk_cap, args.mem_limit_gb, not args.verbose),
            daemon=True,
        )
        self.process.start()
        child.close()

    def recv(self, timeout: float) -> Any:
        """The next message; ``None`` on timeout; ``("died", exitcode)`` if the worker ended."""
        try:
            if not self.conn.poll(max(timeout, 0.0)):
                return None
            return self.conn.recv()
        except (EOFError, OSError):
            self.process.join(5)
            return ("died", self.process.exitcode)

    def send(self, message: Any) -> bool:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            return False
        return True

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.conn.close()


def probe(name: str) -> EngineRun:
    """An engine's run record, marked unavailable when its package is not installed."""
    run = EngineRun(name)
    try:
        if importlib.util.find_spec(MODULES.get(name, name)) is None:
            raise ImportError(MODULES.get(name, name))
        run.version = importlib.metadata.version(PACKAGES[name])
    except (ImportError, importlib.metadata.PackageNotFoundError) as exc:
        run.available = False
        run.unavailable_reason = f"not installed ({exc})"
    return run


def drive(
    run: EngineRun, total: int, args: argparse.Namespace, eos: int, log: Callable[[str], None]
) -> None:
    """Work through ``run.pending`` with one worker process until nothing is left.

    Two lanes may drive the same engine at once (each with its own worker), so that
    the slowest engine's schemas are shared out once the other engines are done.
    """
    name = run.name
    worker: Worker | None = None
    with run.lock:
        if run.started_at is None:
            run.started_at = time.perf_counter()

    def start() -> Worker | None:
        candidate = Worker(name, args, eos)
        message = candidate.recv(args.setup_timeout)
        if message is None or message[0] != "ready":
            candidate.kill()
            detail = "timeout" if message is None else str(message[1])[-2000:]
            log(f"[{name}] setup failed: {detail}")
            with run.lock:
                run.unavailable_reason = f"setup failed: {detail}"
                if not run.ready:
                    run.available = False
            return None
        with run.lock:
            run.workers_started += 1
            if not run.ready:
                run.ready = message[1]
        return candidate

    def note_memory(memory: dict[str, int]) -> None:
        with run.lock:
            run.peak_rss_kb = max(run.peak_rss_kb, memory.get("VmHWM", 0))

    while True:
        with run.lock:
            if not run.pending or not run.available:
                break
            case = run.pending.popleft()
        result = SchemaResult()
        run.schemas[case.index] = result
        if worker is None:
            worker = start()
            if worker is None:
                result.status = "error"
                result.message = run.unavailable_reason
                if not run.available:
                    break
                continue
        payload = [(t.index, t.valid, t.ids, t.text) for t in case.tests]
        given = [(t.index, t.given_ids) for t in case.tests if t.valid and t.given_ids]
        if not worker.send(("job", case.index, case.schema, payload, given)):
            worker.kill()
            worker = None
            result.status = "error"
            result.message = "worker pipe closed"
            continue
        message = worker.recv(args.compile_timeout)
        if message is None or message[0] == "died":
            worker.kill()
            worker = None
            if message is None:
                result.status = "timeout"
                result.message = f"no compile within {args.compile_timeout:g} s (killed)"
            else:
                result.status = "crash" if name == "jsonmode" else "error"
                result.message = f"worker died while compiling (exit code {message[1]})"
        else:
            _, _, status, seconds, text, info = message
            result.status, result.compile_s = status, seconds
            result.message, result.info = text, info
            deadline = time.perf_counter() + args.schema_timeout
            while True:
                message = worker.recv(deadline - time.perf_counter())
                if message is None or message[0] == "died":
                    worker.kill()
                    worker = None
                    result.walk_timeout = message is None
                    if message is not None:
                        result.message += f" | worker died while walking (exit {message[1]})"
                    for test in case.tests:
                        for pass_no in (1, 2):
                            key = (case.index, test.index, pass_no)
                            if key not in run.walks and (pass_no == 1 or test.valid):
                                outcome = "capped" if message is None else "error"
                                run.walks[key] = {"outcome": outcome, "times": [], "flags": {}}
                    break
                if message[0] == "instance":
                    _, s_index, t_index, pass_no, record = message
                    run.walks[(s_index, t_index, pass_no)] = record
                elif message[0] == "done":
                    result.counters = message[2]
                    note_memory(message[3])
                    break
        with run.lock:
            run.done += 1
            done = run.done
            report = time.perf_counter() - run.last_report > 30 or done == total
            if report:
                run.last_report = time.perf_counter()
        if report:
            elapsed = time.perf_counter() - run.started_at
            log(f"[{name}] {done}/{total} schemas, {elapsed:.0f} s")
    if worker is not None:
        worker.send(("stop",))
        message = worker.recv(30)
        if message is not None and message[0] == "bye":
            note_memory(message[1])
        worker.kill()
    with run.lock:
        run.wall_s = time.perf_counter() - run.started_at
