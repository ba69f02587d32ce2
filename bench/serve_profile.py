"""Profile a server process: cProfile (default) or a stack sampler (stdlib only; no py-spy here).

    python bench/serve_profile.py OUT.txt -m jsonmode.cli serve ...   # a module
    python bench/serve_profile.py OUT.txt /path/to/script args...     # a script

Runs the module or script in this process. ``BENCH_PROFILE=cprofile`` (the default):
cProfile over the main thread (the event loop), written as pstats tables by own time
and by cumulative time; cProfile slows every call, so read shares, not times.
``BENCH_PROFILE=sample``: a daemon thread that reads
``sys._current_frames()`` every ``BENCH_PROFILE_INTERVAL`` seconds (default 0.001)
and, when the program ends (SIGINT/SIGTERM end uvicorn gracefully), writes to OUT:
the share of samples in which each thread was busy (its top frame is not a known
wait: the event loop's ``select``, a lock or queue wait), then the functions with
the most busy samples as the top frame (self) and anywhere on the stack
(inclusive), and each thread's CPU seconds. The sampler takes the GIL to read the
frames, so its samples land where the loop releases the GIL (syscalls) more often than
elsewhere: prefer cProfile for where the CPU goes. Either way, SIGUSR1 restarts the
counts (bench/serve.py sends it after the warm-up, so start-up imports stay out); never
time a run with a profiler on.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import runpy
import signal
import sys
import threading
import time
from collections import Counter
from types import FrameType

IDLE = {
    ("selectors.py", "select"),
    ("threading.py", "wait"),
    ("threading.py", "_wait_for_tstate_lock"),
    ("thread.py", "_worker"),
    ("queue.py", "get"),
    ("runners.py", "run"),  # inside uvloop's C loop: polling (or C-level I/O)
    ("_watchdog.py", "_run"),  # jsonmode's deadline thread, blocked on its queue
}


def key(frame: FrameType) -> str:
    code = frame.f_code
    parts = code.co_filename.split(os.sep)
    short = os.sep.join(parts[-2:])
    return f"{short}:{code.co_firstlineno} {code.co_name}"


class Sampler:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.samples: Counter[str] = Counter()  # thread name -> samples
        self.busy: Counter[str] = Counter()  # thread name -> busy samples
        self.self_time: Counter[str] = Counter()
        self.inclusive: Counter[str] = Counter()
        self.callers: dict[str, Counter[str]] = {}  # self key -> its 3 callers, joined
        self.cpu_start = thread_cpu()
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="bench-sampler", daemon=True)

    def run(self) -> None:
        me = threading.get_ident()
        while not self.stop.wait(self.interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, str(ident))
                name = "main" if name == "MainThread" else name.split("_")[0].split("-")[0]
                self.samples[name] += 1
                code = frame.f_code
                if (os.path.basename(code.co_filename), code.co_name) in IDLE:
                    continue
                self.busy[name] += 1
                top = key(frame)
                self.self_time[top] += 1
                chain = []
                up = frame.f_back
                while up is not None and len(chain) < 3:
                    chain.append(key(up).rsplit(" ", 1)[-1])
                    up = up.f_back
                self.callers.setdefault(top, Counter())[" < ".join(chain)] += 1
                seen: set[str] = set()
                walk: FrameType | None = frame
                while walk is not None:
                    k = key(walk)
                    if k not in seen:
                        seen.add(k)
                        self.inclusive[k] += 1
                    walk = walk.f_back

    def reset(self) -> None:
        """Forget what was sampled so far (SIGUSR1: after start-up and warm-up)."""
        for counter in (self.samples, self.busy, self.self_time, self.inclusive):
            counter.clear()
        self.callers.clear()
        self.cpu_start = thread_cpu()
        self.started = time.monotonic()

    def report(self, top: int = 40) -> str:
        busy = sum(self.busy.values()) or 1
        wall = time.monotonic() - self.started
        lines = [f"{wall:.1f} s sampled, interval {self.interval * 1000:g} ms", "threads:"]
        cpu = thread_cpu()
        for name, n in self.samples.most_common():
            used = cpu.get(name, 0.0) - self.cpu_start.get(name, 0.0)
            lines.append(f"  {name}: {n} samples, busy {self.busy[name] / n:.1%}, CPU {used:.2f} s")
        lines.append(f"\nself (top frame), % of {busy} busy samples, with the top callers:")
        for k, n in self.self_time.most_common(top):
            lines.append(f"  {n / busy:6.1%}  {k}")
            for chain, m in self.callers.get(k, Counter()).most_common(2):
                lines.append(f"            {m / busy:6.1%} < {chain}")
        lines.append("\ninclusive (anywhere on the stack), % of busy samples:")
        for k, n in self.inclusive.most_common(top * 2):
            lines.append(f"  {n / busy:6.1%}  {k}")
        return "\n".join(lines) + "\n"


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) per thread name, from /proc (Linux; {} elsewhere)."""
    ticks = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        name = names.get(int(tid), "other")
        name = "main" if name == "MainThread" else name.split("_")[0].split("-")[0]
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


class Deterministic:
    """cProfile over the main thread (the event loop), restarted on SIGUSR1."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile()
        self.started = time.monotonic()
        self.cpu_start = thread_cpu()
        self.profile.enable()

    def reset(self) -> None:
        self.profile.disable()
        self.profile = cProfile.Profile()
        self.started = time.monotonic()
        self.cpu_start = thread_cpu()
        self.profile.enable()

    def report(self, top: int = 45) -> str:
        self.profile.disable()
        cpu = thread_cpu()
        used = {k: v - self.cpu_start.get(k, 0.0) for k, v in cpu.items()}
        text = io.StringIO()
        text.write(f"{time.monotonic() - self.started:.1f} s profiled; thread CPU s: {used}\n")
        stats = pstats.Stats(self.profile, stream=text)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top * 2)
        return text.getvalue()


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: serve_profile.py OUT (-m MODULE | SCRIPT) [ARGS...]")
    out = sys.argv[1]
    profiler: Sampler | Deterministic
    if os.environ.get("BENCH_PROFILE", "cprofile") == "sample":
        profiler = Sampler(float(os.environ.get("BENCH_PROFILE_INTERVAL", "0.001")))
        profiler.thread.start()
    else:
        profiler = Deterministic()
    signal.signal(signal.SIGUSR1, lambda *_: profiler.reset())
    try:
        if sys.argv[2] == "-m":
            module = sys.argv[3]
            sys.argv = [module, *sys.argv[4:]]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = sys.argv[2]
            sys.argv = [script, *sys.argv[3:]]
            runpy.run_path(script, run_name="__main__")
    finally:
        if isinstance(profiler, Sampler):
            profiler.stop.set()
            profiler.thread.join(1)
        with open(out, "w") as f:
            f.write(profiler.report())


if __name__ == "__main__":
    main()
