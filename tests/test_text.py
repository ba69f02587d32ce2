"""``JsonMode.text`` / ``run_text``: a text under a grammar, in every tier.

Prompted: a ScriptedBackend records each request (the grammar described, the re-ask
naming the byte offset). Constrained: a random local model, whose words are noise, so
a matching text can only come from the grammar's token mask. Native: litellm speaking
HTTP to the scripted OpenAI-compatible server, which records each request body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

import jsonmode
from jsonmode import (
    AttemptsExhaustedError,
    Completion,
    InvalidGrammarError,
    JsonMode,
    TransportPolicy,
    UnsupportedSchemaError,
    UsageError,
    compile_choice,
    compile_grammar,
    compile_regex,
    events,
)
from jsonmode.backends import Request, ScriptedBackend

CHESS = """
# up to four moves, e.g. "e4 Nf3 Bb5+"
root  ::= move (" " move){0,3}
move  ::= piece? file rank "+"?
piece ::= [KQRBN]
file  ::= [a-h]
rank  ::= [1-8]
"""
FAST = TransportPolicy(sleep=lambda _: None)


def scripted(*replies: Any, **options: Any) -> tuple[JsonMode, ScriptedBackend]:
    backend = ScriptedBackend(replies, native_schema=options.pop("native_schema", False))
    return JsonMode(backend, transport=FAST, **options), backend


# -- prompted -------------------------------------------------------------------------------


def test_valid_first_time_returns_the_text_and_describes_the_grammar():
    jm, backend = scripted("e4 Nf3 Bb5+")
    result = jm.run_text("Open with three moves.", compile_grammar(CHESS))
    assert (result.value, result.data, result.raw) == ("e4 Nf3 Bb5+",) * 3
    assert result.tier == "prompted"
    assert [a.outcome for a in result.attempts] == ["valid"]
    assert result.repairs == ()
    (request,) = backend.requests
    assert isinstance(request, Request)
    assert request.grammar is not None
    assert request.grammar.kind == "gbnf"
    assert (request.native, request.constrained) == (False, False)
    system, user = request.messages
    assert system["role"] == "system"
    assert CHESS in system["content"]  # the grammar itself, as written
    assert "`root`" in system["content"]
    assert "no markdown code fences" in system["content"]
    assert user == {"role": "user", "content": "Open with three moves."}


def test_gbnf_text_is_compiled_and_text_returns_the_text_alone():
    jm, _ = scripted("Qd8+")
    assert jm.text("One check.", CHESS) == "Qd8+"


def test_reask_says_where_the_text_stopped_matching():
    jm, backend = scripted("e4 Nz3", "e4 Nf3")
    result = jm.run_text("Two moves.", CHESS)
    assert result.value == "e4 Nf3"
    failed, valid = result.attempts
    assert (failed.outcome, valid.outcome) == ("schema_violation", "valid")
    (issue,) = failed.issues
    assert (issue.path, issue.keyword) == ("$", "grammar")
    assert issue.message.startswith('the text stops matching at byte 4, at "z" after "e4 N": ')
    assert "expected a character in [a-h]" in issue.message
    assert failed.error == f"output does not match the grammar: {issue.message}"
    first, second = backend.requests
    assert second.messages[: len(first.messages)] == first.messages
    assistant, feedback = second.messages[-2:]
    assert assistant == {"role": "assistant", "content": "e4 Nz3"}
    assert feedback["role"] == "user"
    text = feedback["content"]
    assert text.startswith("Attempt 1 of 3 did not match the grammar.")
    assert "byte 4" in text
    assert 'after "e4 N"' in text
    assert "expected a character in [a-h]" in text
    assert text.endswith("Reply again with only the corrected text.")
    assert second.grammar is first.grammar


def test_a_text_that_ends_early_says_what_must_follow():
    jm, backend = scripted("e4 N", "e4")
    jm.run_text("x", CHESS)
    feedback = backend.requests[1].messages[-1]["content"]
    assert 'The text ends at byte 4 after "e4 N", where a character in [a-h] must follow.' in (
        feedback
    )


def test_no_attempt_matches_raises_attempts_exhausted_with_every_attempt():
    jm, backend = scripted("hello", "e9", "e4 e5 e6 e7 e8")
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run_text("x", CHESS)
    error = info.value
    assert error.message.startswith("no text matching the grammar after 3 attempt(s); last: ")
    assert [a.outcome for a in error.attempts] == ["schema_violation"] * 3
    assert [a.raw for a in error.attempts] == ["hello", "e9", "e4 e5 e6 e7 e8"]
    assert "byte 11" in str(error.attempts[2].error)  # a fifth move is one too many
    assert not error.repairable
    assert error.hint is None
    assert len(backend.requests) == 3
    assert "Attempt 2 of 3" in backend.requests[2].messages[-1]["content"]


def test_strict_never_repairs_but_hints_that_repair_would():
    fenced = "```\ne4 e5\n```"
    jm, _ = scripted(fenced, fenced, max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run_text("x", CHESS)
    assert info.value.repairable
    assert info.value.hint == "mode='repair' would repair the last output"


@pytest.mark.parametrize(
    ("reply", "text"),
    [
        pytest.param("```\ne4 e5\n```", "e4 e5", id="fence"),
        pytest.param("```gbnf\ne4 e5\n```\n", "e4 e5", id="fence-with-language"),
        pytest.param("  e4 e5\n", "e4 e5", id="whitespace"),
    ],
)
def test_repair_mode_strips_a_fence_or_whitespace_and_records_it(reply, text):
    jm, _ = scripted(reply, mode="repair")
    result = jm.run_text("x", CHESS)
    assert result.value == text
    (repair,) = result.repairs
    assert (repair.path, repair.kind, repair.before, repair.after) == ("$", "extract", reply, text)


def test_repair_mode_never_changes_a_matching_text_nor_repairs_anything_else():
    jm, _ = scripted("abc\n", mode="repair")
    result = jm.run_text("x", compile_regex(r"[a-z]+\n?"))
    assert (result.value, result.repairs) == ("abc\n", ())
    jm, _ = scripted("Sure: e4 e5", "e4 E5", mode="repair", max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run_text("x", CHESS)
    assert [a.outcome for a in info.value.attempts] == ["schema_violation"] * 2


def test_cut_off_at_the_length_limit_is_truncated_never_valid():
    jm, backend = scripted(
        Completion("e4 N", truncated=True),  # ends early
        Completion("1234", truncated=True),  # matches, but [0-9]+ could go on
        max_attempts=2,
    )
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run_text("x", CHESS)
    assert [a.outcome for a in info.value.attempts] == ["truncated", "schema_violation"]
    assert "cut off at the length limit" in str(info.value.attempts[0].error)
    feedback = backend.requests[1].messages[-1]["content"]
    assert "cut off at the length limit" in feedback
    jm, _ = scripted(Completion("1234", truncated=True), max_attempts=1)
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run_text("x", compile_regex("[0-9]+"))
    assert info.value.attempts[0].outcome == "truncated"
    assert "where the text could go on" in str(info.value.attempts[0].error)
    # nothing may follow a complete choice: cut off or not, it is the whole answer
    jm, _ = scripted(Completion("yes", truncated=True))
    assert jm.text("x", compile_choice(["yes", "no"])) == "yes"


def test_regex_and_choice_are_described_and_judged():
    jm, backend = scripted("2024-13", "2024-12")
    assert jm.text("A month.", compile_regex(r"\d{4}-(0[1-9]|1[0-2])")) == "2024-12"
    system = backend.requests[0].messages[0]["content"]
    assert "regular expression" in system
    assert r"\d{4}-(0[1-9]|1[0-2])" in system
    feedback = backend.requests[1].messages[-1]["content"]
    assert feedback.startswith("Attempt 1 of 3 did not match the regular expression.")
    assert "byte 6" in feedback
    jm, backend = scripted('"positive"', "positive")
    assert jm.text("Sentiment?", compile_choice(["positive", "negative", "mixed \u00e9"])) == (
        "positive"
    )
    system = backend.requests[0].messages[0]["content"]
    assert '- "positive"\n- "negative"\n- "mixed \u00e9"' in system
    assert "did not match any of the choices" in backend.requests[1].messages[-1]["content"]


def test_a_rule_bound_to_a_schema_is_described_with_its_schema():
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    grammar = compile_grammar('root ::= "CALL " args', schemas={"args": schema})
    reply = 'CALL {"city": "Oslo"}'
    jm, backend = scripted('CALL {"town": "Oslo"}', reply)
    assert jm.text("Weather in Oslo?", grammar) == reply
    system = backend.requests[0].messages[0]["content"]
    assert "The rule `args` is one JSON document that conforms to this JSON Schema" in system
    assert '"city"' in system


def test_examples_must_match_and_become_turns():
    jm, backend = scripted("e4")
    jm.run_text("Open.", CHESS, examples=[("Reply to e4.", "e5"), ("Queen's gambit.", "d4 d5 c4")])
    messages = backend.requests[0].messages
    roles = [m["role"] for m in messages]
    assert roles == ["system", *["user", "assistant"] * 2, "user"]
    assert messages[2]["content"] == "e5"
    assert messages[4]["content"] == "d4 d5 c4"
    with pytest.raises(UsageError, match=r"example 1 does not match the grammar: .*byte 1"):
        jm.run_text("Open.", CHESS, examples=[("a", "e5"), ("b", "e9")])
    with pytest.raises(UsageError, match="example 0 must be a"):
        jm.run_text("Open.", CHESS, examples=[("a", 5)])  # type: ignore[list-item]
    assert len(backend.requests) == 1


def test_bad_grammars_raise_before_any_request():
    jm, backend = scripted("x")
    with pytest.raises(InvalidGrammarError) as info:
        jm.run_text("x", 'root ::= "a" (')
    assert (info.value.line, info.value.column) == (1, 14)
    with pytest.raises(UnsupportedSchemaError, match="left recursion"):
        jm.run_text("x", 'root ::= root "a" | "b"')
    with pytest.raises(UsageError, match="CompiledGrammar"):
        jm.run_text("x", {"type": "string"})
    assert backend.requests == []


def test_async_drivers():
    jm, _ = scripted("e4 Nz3", "e4 Nf3", "Ke2")

    async def both() -> tuple[Any, str]:
        result = await jm.arun_text("x", CHESS)
        return result, await jm.atext("y", CHESS)

    result, text = asyncio.run(both())
    assert result.value == "e4 Nf3"
    assert [a.outcome for a in result.attempts] == ["schema_violation", "valid"]
    assert text == "Ke2"


def test_events_carry_the_tier_and_the_name():
    seen: list[Any] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        jm, _ = scripted("e9", "e4")
        jm.run_text("x", CHESS, schema_name="chess")
    finally:
        unsubscribe()
    attempts = [e for e in seen if isinstance(e, events.AttemptFinished)]
    finished = [e for e in seen if isinstance(e, events.RequestFinished)]
    assert [e.attempt.outcome for e in attempts] == ["schema_violation", "valid"]
    (done,) = finished
    assert (done.tier, done.schema_name, done.fallback) == ("prompted", "chess", False)


def test_native_tier_without_a_grammar_endpoint_runs_prompted():
    jm, backend = scripted("e4", native_schema=True, tier="native")
    assert jm.tier == "native"
    result = jm.run_text("x", CHESS)
    assert result.tier == "prompted"
    assert backend.requests[0].native is False


class _LocalWithoutGrammars(ScriptedBackend):
    """A constrained-decoding backend that cannot take grammars."""

    constrained_decoding = True

    def constrain(self, schema: object) -> None:
        return None


def test_constrained_tier_without_grammar_support_falls_back_to_prompted():
    backend = _LocalWithoutGrammars(["e4"])
    seen: list[Any] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        result = JsonMode(backend, transport=FAST).run_text("x", CHESS)
    finally:
        unsubscribe()
    assert result.tier == "prompted"
    assert backend.requests[0].constrained is False
    (done,) = [e for e in seen if isinstance(e, events.RequestFinished)]
    assert done.fallback is True


def test_schema_runs_are_unchanged_by_the_text_session():
    jm, backend = scripted('{"a": 1}')
    assert jm.generate("x", {"type": "object"}) == {"a": 1}
    assert backend.requests[0].grammar is None


# -- constrained: a random local model under the grammar's mask -----------------------------


@pytest.fixture(scope="module")
def local() -> tuple[Any, Any]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from jsonmode.demo import random_local_model

    return random_local_model(seed=1)


def test_random_model_only_ever_writes_text_the_grammar_accepts(local):
    import torch

    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=48, do_sample=True)
    grammar = compile_grammar(CHESS)
    texts = set()
    for seed in range(6):
        torch.manual_seed(seed)
        result = jm.run_text("Moves:", grammar)
        assert result.tier == "constrained"
        assert [a.outcome for a in result.attempts] == ["valid"]
        assert grammar.accepts(result.value), result.value
        texts.add(result.value)
    assert len(texts) > 1  # sampled, not one forced text


@pytest.mark.parametrize(
    "grammar",
    [
        pytest.param(compile_regex(r"[0-9]{2,4}-[a-z]{1,3}( ok)?"), id="regex"),
        pytest.param(
            compile_choice(["alpha", "beta", "gamma delta", "\u00e9t\u00e9"]), id="choice"
        ),
        pytest.param(
            compile_grammar(
                'root ::= "set " args',
                schemas={
                    "args": {
                        "type": "object",
                        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                        "required": ["n"],
                        "additionalProperties": False,
                    }
                },
            ),
            id="bound-schema",
        ),
    ],
)
def test_random_model_under_regex_choice_and_bound_schema(local, grammar):
    import torch

    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=48, do_sample=True)
    for seed in range(3):
        torch.manual_seed(seed)
        result = jm.run_text("x", grammar)
        assert (result.tier, [a.outcome for a in result.attempts]) == ("constrained", ["valid"])
        assert grammar.accepts(result.value), result.value


def test_a_length_limit_too_short_is_truncated(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=2, max_attempts=2)
    with pytest.raises(AttemptsExhaustedError) as info:
        jm.run_text("x", compile_regex("[a-z]{30}"))
    assert [a.outcome for a in info.value.attempts] == ["truncated", "truncated"]


def test_the_backend_takes_a_grammar_for_its_vocabulary_once(local):
    from jsonmode.backends.transformers import TransformersBackend

    model, tokenizer = local
    backend = TransformersBackend(model, tokenizer, max_new_tokens=24)
    grammar = compile_grammar(CHESS)
    assert grammar.vocabulary is None
    made = backend.constrain_grammar(grammar)
    assert made.vocabulary is backend.vocabulary
    assert made.network is grammar.network  # nothing recompiled
    assert backend.constrain_grammar(grammar) is made  # its mask engine is kept
    assert backend.constrain_grammar(made) is made  # already for this vocabulary
    own = compile_grammar(CHESS, backend.vocabulary)
    assert backend.constrain_grammar(own) is own


def test_batches_and_streams_decode_under_the_grammar(local):
    import torch

    from jsonmode.backends.transformers import TransformersBackend
    from jsonmode.decoding.compiled import compile_schema

    model, tokenizer = local
    backend = TransformersBackend(model, tokenizer, max_new_tokens=24, do_sample=True)
    chess, choice = compile_grammar(CHESS), compile_choice(["yes", "no"])
    messages = ({"role": "user", "content": "x"},)
    schema = jsonmode.Schema.of({"enum": ["ab", "cd"]})
    requests = [
        Request(messages, schema, constrained=True, grammar=chess),
        Request(messages, schema, constrained=True, grammar=choice),
        Request(messages, schema, constrained=True, grammar=chess),
        Request(messages, schema, constrained=True),
    ]
    torch.manual_seed(0)
    replies = backend.complete_batch(requests)
    assert all(isinstance(reply, Completion) for reply in replies)
    texts = [reply.text for reply in replies]  # type: ignore[union-attr]
    assert chess.accepts(texts[0]), texts
    assert chess.accepts(texts[2]), texts
    assert texts[1] in ("yes", "no")
    assert compile_schema(schema.json_schema).accepts(texts[3])
    pieces = list(backend.stream(requests[0]))
    whole = pieces[-1]
    assert isinstance(whole, Completion)
    assert "".join(p for p in pieces if isinstance(p, str)) == whole.text
    assert chess.accepts(whole.text)


# -- native: vLLM's structured_outputs, through real litellm -----------------------------------

Start = Callable[..., Any]


def vllm(server: Any, model: str = "hosted_vllm/test-model", **options: Any) -> JsonMode:
    return JsonMode(
        model,
        api_base=server.base_url,
        api_key="unused",
        timeout=5.0,
        transport=TransportPolicy(max_retries=1, initial_wait=0.01, max_wait=0.02),
        **options,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("grammar", "field", "reply"),
    [
        pytest.param(CHESS, {"grammar": CHESS}, "e4 e5", id="gbnf"),
        pytest.param(
            compile_regex(r"\d{3}-\d{4}"), {"regex": r"\d{3}-\d{4}"}, "555-0100", id="regex"
        ),
        pytest.param(compile_choice(["yes", "no"]), {"choice": ["yes", "no"]}, "no", id="choice"),
    ],
)
def test_vllm_gets_the_grammar_as_structured_outputs(openai_server: Start, grammar, field, reply):
    from support.openai_server import Reply

    server = openai_server(Reply(reply))
    jm = vllm(server)
    assert jm.tier == "native"
    result = jm.run_text("x", grammar)
    assert (result.value, result.tier) == (reply, "native")
    (body,) = server.requests
    assert body["structured_outputs"] == field
    assert not {"response_format", "tools", "guided_grammar", "guided_regex"} & set(body)
    assert body["messages"][0]["role"] == "system"  # described too: belt and braces


@pytest.mark.integration
def test_vllm_native_text_is_still_post_validated_and_reasked(openai_server: Start):
    from support.openai_server import Reply

    server = openai_server(Reply("e4 z5"), Reply("e4 d5"))
    result = vllm(server).run_text("x", CHESS)
    assert result.value == "e4 d5"
    assert [a.outcome for a in result.attempts] == ["schema_violation", "valid"]
    first, second = server.requests
    assert first["structured_outputs"] == second["structured_outputs"] == {"grammar": CHESS}
    assert "byte 3" in second["messages"][-1]["content"]


@pytest.mark.integration
def test_vllm_keeps_the_callers_extra_body(openai_server: Start):
    from support.openai_server import Reply

    server = openai_server(Reply("yes"))
    extra = {"top_k": 5, "structured_outputs": {"disable_any_whitespace": True}}
    vllm(server, extra_body=extra).text("x", compile_choice(["yes", "no"]))
    (body,) = server.requests
    assert body["top_k"] == 5
    assert body["structured_outputs"] == {"disable_any_whitespace": True, "choice": ["yes", "no"]}
    assert extra == {"top_k": 5, "structured_outputs": {"disable_any_whitespace": True}}


@pytest.mark.integration
def test_vllm_processor_servers_get_the_grammar_natively(openai_server: Start):
    from support.openai_server import Reply

    server = openai_server(Reply("no"))
    jm = vllm(server, model="openai/served", vllm_processor=True)
    assert jm.run_text("x", compile_choice(["yes", "no"])).tier == "native"
    (body,) = server.requests
    assert body["structured_outputs"] == {"choice": ["yes", "no"]}
    assert "json_schema" not in (body.get("vllm_xargs") or {})


@pytest.mark.integration
def test_kinds_vllm_cannot_take_and_other_providers_run_prompted(openai_server: Start):
    from support.openai_server import Reply

    bound = compile_grammar('root ::= "n=" n', schemas={"n": {"type": "integer"}})
    server = openai_server(Reply("n=3"), Reply("e4"))
    assert vllm(server).run_text("x", bound).tier == "prompted"
    jm = vllm(server, model="openai/test-model", tier="native")
    assert jm.run_text("x", CHESS).tier == "prompted"
    for body in server.requests:
        assert not {"structured_outputs", "response_format", "tools"} & set(body)
        assert json.dumps(body["messages"])  # plain chat messages
