"""A stack sampler for a server process (stdlib only; py-spy is not on this machine).

    python bench/serve_profile.py OUT.txt -m jsonmode.cli serve ...   # a module
    python bench/serve_profile.py OUT.txt /path/to/script args...     # a script

Runs the module or script in this process with a daemon thread that reads
``sys._current_frames()`` every ``BENCH_PROFILE_INTERVAL`` seconds (default 0.001)
and, when the program ends (SIGINT/SIGTERM end uvicorn gracefully), writes to OUT:
the share of samples in which each thread was busy (its top frame is not a known
wait: the event loop's ``select``, a lock or queue wait), then the functions with
the most busy samples as the top frame (self) and anywhere on the stack
(inclusive). The sampler takes the GIL to read the frames, so it slows the server
a little; compare shares, not absolute times, and never time a run with it on.
"""

from __future__ import annotations

import os
import runpy
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
    ("base_events.py", "_run_once_idle"),
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
                self.self_time[key(frame)] += 1
                seen: set[str] = set()
                walk: FrameType | None = frame
                while walk is not None:
                    k = key(walk)
                    if k not in seen:
                        seen.add(k)
                        self.inclusive[k] += 1
                    walk = walk.f_back

    def report(self, top: int = 40) -> str:
        busy = sum(self.busy.values()) or 1
        lines = ["threads (samples, busy):"]
        for name, n in self.samples.most_common():
            lines.append(f"  {name}: {n} samples, busy {self.busy[name] / n:.1%}")
        lines.append(f"\nself (top frame), % of {busy} busy samples:")
        for k, n in self.self_time.most_common(top):
            lines.append(f"  {n / busy:6.1%}  {k}")
        lines.append("\ninclusive (anywhere on the stack), % of busy samples:")
        for k, n in self.inclusive.most_common(top * 2):
            lines.append(f"  {n / busy:6.1%}  {k}")
        return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: serve_profile.py OUT (-m MODULE | SCRIPT) [ARGS...]")
    out = sys.argv[1]
    interval = float(os.environ.get("BENCH_PROFILE_INTERVAL", "0.001"))
    sampler = Sampler(interval)
    started = time.monotonic()
    sampler.thread.start()
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
        sampler.stop.set()
        sampler.thread.join(1)
        with open(out, "w") as f:
            f.write(f"{time.monotonic() - started:.1f} s, interval {interval * 1000:g} ms\n")
            f.write(sampler.report())


if __name__ == "__main__":
    main()
