"""jsonmode's TypeScript conversion against ``ts-json-schema-generator`` (issue 44 item 2).

For every file of tests/corpus/typescript/ (``NAME.ts`` and ``NAME.json``: the root type,
hand-written ``valid`` and ``invalid`` instances), the reference tool (under Node,
installed by npm once per session: tests/support/ts_reference.py) and jsonmode each
make a schema, and every instance gets the same verdict from both, the verdict the
file says. The differences by design (README, "TypeScript types as the schema") are
listed in the file's ``differences``: each is asserted, instance by instance, with
jsonmode's verdict and the reference's, never skipped. A missing node or npm fails.

The reference's Draft-07 schema is validated by jsonschema (format checks on, as
jsonmode's are); jsonmode's by :meth:`jsonmode.Schema.check`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.ts_reference import Reference, install

import jsonmode

CORPUS = Path(__file__).resolve().parent / "corpus" / "typescript"
FILES = sorted(CORPUS.glob("*.ts"))


def cases_of(path: Path) -> dict[str, Any]:
    cases: dict[str, Any] = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
    return cases


@pytest.fixture(scope="module")
def reference_schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every corpus file's schema from the reference tool (one node process)."""
    reference: Reference = install(tmp_path_factory.mktemp("ts-json-schema-generator"))
    assert reference.version.startswith("2.4.")
    requests = [(path, cases_of(path)["root"]) for path in FILES]
    schemas = reference.schemas(requests)
    return {path.name: schema for path, schema in zip(FILES, schemas, strict=True)}


def reference_verdict(schema: dict[str, Any], instance: Any) -> bool:
    cls = jsonschema.validators.validator_for(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return bool(validator.is_valid(instance))


def test_the_corpus_covers_every_construct() -> None:
    # (Each file also holds its README example; the reference test below reads them all.)
    names = {path.stem for path in FILES}
    assert {"readme", "unions", "arrays", "objects", "extends", "enums", "recursive"} <= names
    assert {"jsdoc", "generics", "primitives", "differences"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_same_verdicts_as_ts_json_schema_generator(
    path: Path, reference_schemas: dict[str, dict[str, Any]]
) -> None:
    cases = cases_of(path)
    ours = jsonmode.Schema.of(path, name=cases["root"])
    theirs = reference_schemas[path.name]
    assert theirs["$schema"] == "http://json-schema.org/draft-07/schema#"
    differences = {
        json.dumps(item["instance"], sort_keys=True): item for item in cases.get("differences", [])
    }
    checked = 0
    for expected, instances in ((True, cases["valid"]), (False, cases["invalid"])):
        for instance in instances:
            mine = ours.check(instance).ok
            reference = reference_verdict(theirs, instance)
            known = differences.pop(json.dumps(instance, sort_keys=True), None)
            if known is None:
                assert (mine, reference) == (expected, expected), instance
            else:
                # A difference by design: jsonmode's verdict is the intended one.
                assert (mine, reference) == (known["jsonmode"], known["reference"]), known
                assert mine == expected
            checked += 1
    assert not differences, f"differences listed for no instance: {list(differences)}"
    assert checked >= 5
