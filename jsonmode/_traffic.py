"""Demo traffic for ``jsonmode demo --metrics-port P``: a steady stream of requests to
watch on the dashboard.

A scripted "model" answers each request along a plan drawn at random: mostly clean
JSON, sometimes the slips real models make (prose, fences, ``"36"`` for an integer, a
missing field, a reply cut off at the length limit), a rate limit that the transport
policy retries, now and then a request that never conforms. Every 90 seconds a
20-second rough patch makes failures ten times likelier, so the conformance chart
has something to show. Replies take a random, model-like time (tens to hundreds of
milliseconds). With a local model, one constrained generation runs every few
seconds, feeding the decoder panels.
"""

from __future__ import annotations

import functools
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from jsonmode.backends.base import Completion, Request
from jsonmode.errors import JsonModeError, PermanentBackendError, TransientBackendError
from jsonmode.facade import JsonMode
from jsonmode.result import Usage
from jsonmode.retry import TransportPolicy

__all__ = ["run_traffic"]

Step = str | Completion | BaseException

_CLEAN = (
    '{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", '
    '"languages": ["English", "French"]}'
)
_FENCED = f"Here you go:\n```json\n{_CLEAN}\n```"
_SLOPPY = (
    "{'name': 'Ada Lovelace', 'age': 36, 'email': 'ada@example.org', "
    "'languages': ['English', 'French',],}"
)
_STRING_AGE = _CLEAN.replace('"age": 36', '"age": "36"')
_WORDS_AGE = _CLEAN.replace('"age": 36', '"age": "thirty-six"')
_NEGATIVE_AGE = _CLEAN.replace('"age": 36', '"age": -36')
_MISSING = '{"name": "Ada Lovelace", "age": 36}'
_PROSE = "I could not find a person in that text, sorry."
_CUT_OFF = Completion(_CLEAN[:52], truncated=True)

# name: (weight, weight in a rough patch, replies for attempts 1, 2, 3 ...; the last repeats)
_PLANS: dict[str, tuple[float, float, Sequence[Step]]] = {
    "clean": (62, 40, [_CLEAN]),
    "fenced": (8, 8, [_FENCED, _CLEAN]),
    "sloppy": (6, 6, [_SLOPPY, _CLEAN]),
    "string_age": (6, 6, [_STRING_AGE, _CLEAN]),
    "words_age": (3, 3, [_WORDS_AGE, _CLEAN]),
    "negative_age": (2, 2, [_NEGATIVE_AGE, _CLEAN]),
    "missing": (4, 6, [_MISSING, _CLEAN]),
    "cut_off": (4, 6, [_CUT_OFF, _CLEAN]),
    "rate_limited": (3, 6, [TransientBackendError("429 rate limited (demo)"), _CLEAN]),
    "stubborn": (1.2, 12, [_PROSE, _MISSING, _WORDS_AGE]),
    "refuses": (0.5, 5, [_PROSE]),
    "down": (0.3, 3, [PermanentBackendError("503 model unavailable (demo)")]),
}
_NATIVE_PLANS: dict[str, tuple[float, float]] = {
    "clean": (90, 80),
    "cut_off": (6, 12),
    "rate_limited": (3, 6),
    "down": (1, 2),
}


class _ScriptedModel:
    """Follows ``plan`` attempt by attempt; sleeps a model-like time per call."""

    def __init__(self, rng: random.Random, *, native: bool, median_s: float) -> None:
        self.native_schema: bool | None = native
        self.name = "demo-native" if native else "demo-prompted"
        self._rng = rng
        self._median = median_s
        self.plan: list[Step] = [_CLEAN]

    def complete(self, request: Request) -> Completion:
        step = self.plan.pop(0) if len(self.plan) > 1 else self.plan[0]
        time.sleep(min(2.0, self._rng.lognormvariate(0, 0.5) * self._median))
        if isinstance(step, BaseException):
            raise step
        completion = step if isinstance(step, Completion) else Completion(step)
        prompt = sum(len(str(m.get("content", ""))) for m in request.messages) // 4
        usage = Usage(prompt, max(1, len(completion.text) // 4))
        return Completion(completion.text, usage, completion.truncated)

    async def acomplete(self, request: Request) -> Completion:
        return self.complete(request)


def _pick(rng: random.Random, plans: dict[str, tuple[float, float]], rough: bool) -> str:
    names = list(plans)
    weights = [plans[name][1 if rough else 0] for name in names]
    return rng.choices(names, weights)[0]


def run_traffic(
    schema: object,
    stream: TextIO,
    *,
    duration: float | None = None,
    local: Callable[[], Any] | None = None,
    seed: int = 7,
) -> Counter[str]:
    """Send demo requests until ``duration`` seconds pass (None: until Ctrl-C).

    ``local``, when given, runs one constrained generation; it is called every few
    seconds. Returns the count of request outcomes (``ok`` / ``failed``).
    """
    rng = random.Random(seed)
    transport = TransportPolicy(max_retries=2, initial_wait=0.05, max_wait=0.2)
    prompted = _ScriptedModel(rng, native=False, median_s=0.12)
    native = _ScriptedModel(rng, native=True, median_s=0.08)
    clients = [
        (prompted, JsonMode(prompted, "repair", transport=transport, schema_name="person")),
        (prompted, JsonMode(prompted, "strict", transport=transport, schema_name="person")),
        (native, JsonMode(native, "strict", transport=transport, schema_name="person")),
    ]
    plans = {name: (weight, rough) for name, (weight, rough, _) in _PLANS.items()}
    started = last_report = last_local = time.monotonic()
    tally: Counter[str] = Counter()
    while duration is None or time.monotonic() - started < duration:
        now = time.monotonic()
        rough = (now - started) % 90 >= 70
        if local is not None and now - last_local >= 4:
            last_local = now
            _count(tally, local)
            continue
        model, jm = rng.choice(clients)
        name = _pick(rng, _NATIVE_PLANS if model is native else plans, rough)
        model.plan = list(_PLANS[name][2])
        _count(tally, functools.partial(jm.run, "Extract the person: Ada Lovelace, 36", schema))
        if now - last_report >= 10:
            last_report = now
            total = tally["ok"] + tally["failed"]
            stream.write(
                f"   {total} requests, {tally['ok'] / total:.1%} conformed"
                f"{' (rough patch)' if rough else ''}\n"
            )
            stream.flush()
    return tally


def _count(tally: Counter[str], request: Callable[[], Any]) -> None:
    try:
        request()
    except JsonModeError:
        tally["failed"] += 1
    else:
        tally["ok"] += 1
