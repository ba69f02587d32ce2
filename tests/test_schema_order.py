"""tests/support/schema_order.py: instances re-serialised in the order decoding writes.

Both gates (JSON-Schema-Test-Suite, MaskBench) and bench/decoder.py use this order, so a
mistake here would make all three measure the wrong text; these pin it against the decoder.
"""

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
from support.schema_order import SchemaOrder, resolve_pointer

from jsonmode.decoding.compiled import compile_schema

ROOT = Path(__file__).resolve().parents[1]


def _order(schema: Any, value: Any) -> Any:
    return SchemaOrder(schema, jsonschema.Draft202012Validator(schema)).order(value)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_declared_members_follow_the_schema_and_undeclared_ones_keep_their_place_last():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "additionalProperties": {"type": "integer"},
    }
    ordered = _order(schema, {"z": 1, "b": 2, "y": 3, "a": 4})
    assert list(ordered) == ["a", "b", "z", "y"]
    compiled = compile_schema(schema)
    assert compiled.accepts(_compact(ordered))
    assert not compiled.accepts(_compact({"b": 2, "a": 4}))  # why the reordering exists


def test_refs_allof_and_the_matching_anyof_branch_are_followed_at_every_depth():
    schema = {
        "$defs": {"point": {"properties": {"x": {"type": "number"}, "y": {"type": "number"}}}},
        "type": "object",
        "properties": {"at": {"$ref": "#/$defs/point"}},
        "allOf": [{"properties": {"tag": {"type": "string"}}}],
        "anyOf": [
            {"properties": {"n": {"type": "integer"}, "m": {"type": "integer"}}, "required": ["n"]},
            {"properties": {"s": {"type": "string"}, "t": {"type": "string"}}, "required": ["s"]},
        ],
        "required": ["at"],
    }
    given = {"t": "v", "s": "w", "tag": "k", "at": {"y": 1, "x": 2}}
    ordered = _order(schema, given)
    assert ordered == given  # the same value ...
    assert list(ordered) == ["at", "tag", "s", "t"]  # ... in the order decoding writes it
    assert list(ordered["at"]) == ["x", "y"]
    assert compile_schema(schema).accepts(_compact(ordered))


def test_a_ref_targets_members_come_before_its_siblings_as_decoding_writes_them():
    schema = {
        "$ref": "#/$defs/base",
        "properties": {"own": {"type": "string"}},
        "$defs": {"base": {"properties": {"inherited": {"type": "string"}}}},
    }
    ordered = _order(schema, {"own": "a", "inherited": "b"})
    assert list(ordered) == ["inherited", "own"]
    compiled = compile_schema(schema)
    assert compiled.accepts(_compact(ordered))
    assert not compiled.accepts(_compact({"own": "a", "inherited": "b"}))


def test_arrays_and_scalars_are_never_changed_and_items_are_ordered_by_their_schema():
    schema = {
        "type": "array",
        "prefixItems": [{"properties": {"p": {}, "q": {}}}],
        "items": {"properties": {"r": {}, "s": {}}},
    }
    assert _order(schema, [{"q": 1, "p": 2}, {"s": [3, 1], "r": "x"}]) == [
        {"p": 2, "q": 1},
        {"r": "x", "s": [3, 1]},
    ]
    assert [list(v) for v in _order(schema, [{"q": 1, "p": 2}, {"s": 0, "r": 1}])] == [
        ["p", "q"],
        ["r", "s"],
    ]
    assert _order(schema, "text") == "text"


def test_pointers_resolve_escapes_and_indexes_and_refuse_what_is_not_there():
    root = {"$defs": {"a/b": {"x": [10, {"y~": 1}]}}}
    assert resolve_pointer(root, "#/$defs/a~1b/x/1/y~0") == 1
    assert resolve_pointer(root, "#/$defs/missing") is None
    assert resolve_pointer(root, "other.json#/x") is None


def test_the_benchmark_walks_maskbench_instances_in_schema_order_and_keeps_the_given_one():
    sys.path.insert(0, str(ROOT / "bench"))
    import decoder  # bench/ is not a package

    cases = decoder.load_sample(300, 20250301)  # the benchmark of record's sample
    reordered = [(c, t) for c in cases for t in c.tests if t.given_ids is not None]
    assert reordered, "MaskBench lists some members out of schema order"
    for _, test in reordered:
        assert json.loads(test.text) == test.data  # the same value, another member order
        assert test.text != _compact(test.data)
        assert test.ids != test.given_ids
    untouched = [t for c in cases for t in c.tests if t.given_ids is None]
    assert all(t.text == _compact(t.data) for t in untouched)
    area = next(c for c in cases if c.file == "Glaiveai2K---calculate_area_7003196f.json")
    assert area.tests[0].valid
    assert list(area.tests[0].data) == ["shape", "radius"]
    assert area.tests[0].text == '{"radius":10,"shape":"circle"}'  # properties sorted there
    assert compile_schema(area.schema).accepts(area.tests[0].text)
