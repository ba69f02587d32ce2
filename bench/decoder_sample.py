"""The decoder benchmark's sample: MaskBench schemas with their instances, tokenized.

Part of ``bench/decoder.py`` (see its docstring). :func:`load_sample` draws ``count``
schemas per category in proportion to its size (seeded), serialises each instance
compactly with its object members in schema order (``tests/support/schema_order.py``),
tokenizes it with the Qwen2.5 tokenizer and records the ``jsonschema`` package's own
verdict. Also imported by ``bench/ab.py``, ``bench/paired.py``, ``bench/masks.py``,
``bench/grammars.py`` and the tests (through ``decoder``).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.schema_order import SchemaOrder  # noqa: E402  (shared with the MaskBench gate)

DATA = ROOT.parent / "shared" / "data"
MASKBENCH = DATA / "jsonschemabench" / "maskbench"
TOKENIZER_DIR = DATA / "tokenizers" / "qwen2.5"


@dataclass
class Test:
    index: int
    valid: bool
    data: Any
    text: str
    ids: list[int]  # ``text``: the instance with its members in schema order
    jsonschema_valid: bool | None = None  # the jsonschema package's verdict (formats on)
    given_ids: list[int] | None = None  # the instance as MaskBench lists it, when that differs


@dataclass
class Case:
    index: int
    category: str
    file: str
    schema: Any
    tests: list[Test]


def load_sample(count: int, seed: int) -> list[Case]:
    """``count`` schemas with tests, drawn per category in proportion to its size."""
    by_category: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            records = [json.loads(line) for line in handle]
        records = [r for r in records if r.get("tests")]
        records.sort(key=lambda r: r["file"])
        by_category[path.name.split(".")[0]] = records
    rng = random.Random(seed)
    total = sum(len(v) for v in by_category.values())
    count = min(count, total)
    quota = {c: count * len(v) / total for c, v in by_category.items()}
    alloc = {c: min(len(by_category[c]), max(1, math.floor(q))) for c, q in quota.items()}
    # Largest remainder until the total is reached (or removed when the minimum overshoots).
    order = sorted(quota, key=lambda c: quota[c] - math.floor(quota[c]), reverse=True)
    while sum(alloc.values()) < count:
        for category in order:
            if sum(alloc.values()) < count and alloc[category] < len(by_category[category]):
                alloc[category] += 1
    while sum(alloc.values()) > count:
        biggest = max(alloc, key=lambda c: alloc[c])
        alloc[biggest] -= 1
    chosen: list[tuple[str, dict[str, Any]]] = []
    for category, records in by_category.items():
        chosen.extend((category, r) for r in rng.sample(records, alloc[category]))
    rng.shuffle(chosen)

    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    cases = []
    for index, (category, record) in enumerate(chosen):
        tests = []
        order = _schema_order(record["schema"])
        for t_index, test in enumerate(record["tests"]):
            given = _compact(test["data"])
            text = given if order is None else _compact(order.order(test["data"]))
            tests.append(
                Test(
                    t_index,
                    bool(test["valid"]),
                    test["data"],
                    text,
                    encode(text),
                    given_ids=None if text == given else encode(given),
                )
            )
        cases.append(Case(index, category, record["file"], record["schema"], tests))
    _jsonschema_verdicts(cases)
    return cases


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _schema_order(schema: Any) -> SchemaOrder | None:
    """The schema-order serialiser, or ``None`` for a schema jsonschema cannot load."""
    try:
        return SchemaOrder(schema, _validator(schema))
    except Exception:
        return None


def _validator(schema: Any) -> Any:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _jsonschema_verdicts(cases: list[Case]) -> None:
    for case in cases:
        try:
            validator = _validator(case.schema)
        except Exception:
            continue
        for test in case.tests:
            with contextlib.suppress(Exception):
                test.jsonschema_valid = validator.is_valid(test.data)
