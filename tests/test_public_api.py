"""The public surface is exactly this: changing it is a deliberate act."""

import subprocess
import sys

import jsonmode

PUBLIC = {
    "Attempt",
    "AttemptsExhaustedError",
    "Backend",
    "BackendError",
    "BudgetExceededError",
    "CompiledGrammar",
    "CompiledSchema",
    "Completion",
    "InvalidGrammarError",
    "InvalidSchemaError",
    "Issue",
    "JsonMode",
    "JsonModeError",
    "JsonModeWarning",  # the warning category of Schema.warnings (issue 38), to filter on
    "OutputError",
    "OutputParseError",
    "OutputTruncatedError",
    "Parsed",
    "PermanentBackendError",
    "Reasoning",  # how a model thinks before it answers (issue 41)
    "Repair",
    "Request",
    "Result",
    "Schema",
    "SchemaError",
    "SchemaViolationError",
    "TransientBackendError",
    "TransportPolicy",
    "UnsupportedSchemaError",
    "UsageError",
    "Usage",
    "Vocabulary",
    "__version__",
    "compile_choice",
    "compile_csv",
    "compile_grammar",
    "compile_jsonl",
    "compile_regex",
    "compile_schema",
    # issue 41: xgrammar's structural tags (tool calls in prose), compiled by our engine
    "compile_structural_tag",
    "parse",
    "structured",
}


def test_all_is_pinned():
    assert set(jsonmode.__all__) == PUBLIC
    assert len(jsonmode.__all__) == len(PUBLIC)


def test_every_public_name_exists():
    for name in jsonmode.__all__:
        assert hasattr(jsonmode, name), name


def test_import_stays_light():
    """`import jsonmode` must not import litellm, torch, or the optional integrations."""
    code = (
        "import sys, jsonmode, jsonmode.cli;"
        "heavy = [m for m in ('litellm', 'openai', 'torch', 'transformers', 'langchain_core',"
        " 'numpy', 'jsonmode.decoding.compiled',"
        " 'crewai', 'rfc3987_syntax.syntax_helpers') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_errors_form_one_tree():
    from jsonmode import errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        if name == "JsonModeWarning":  # the one warning category, beside the tree
            assert issubclass(cls, UserWarning)
            continue
        assert issubclass(cls, jsonmode.JsonModeError), name
    assert jsonmode.TransientBackendError.retryable
    assert not jsonmode.PermanentBackendError.retryable
    assert jsonmode.OutputError.retryable
    assert not jsonmode.AttemptsExhaustedError.retryable
    assert not jsonmode.SchemaError.retryable
    assert issubclass(jsonmode.UsageError, TypeError)


def test_deferred_format_module_behaves_like_the_real_one():
    """The IRI grammar loads on first use, and other importers still see the real module."""
    code = (
        "import sys, jsonmode;"
        "assert 'rfc3987_syntax.syntax_helpers' not in sys.modules;"
        "assert jsonmode.Schema.of({'format': 'iri'}).issues('a b');"
        "assert 'rfc3987_syntax.syntax_helpers' in sys.modules;"
        "from rfc3987_syntax import RFC3987_SYNTAX_TERMS;"
        "print(len(RFC3987_SYNTAX_TERMS) > 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
