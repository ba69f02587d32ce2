"""A real vLLM OpenAI-compatible server on 127.0.0.1, started with jsonmode's processor
(``--logits-processors``), driven through the ``openai`` client and through jsonmode's
own façade (the native tier: vLLM's built-in structured outputs)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import openai
import pytest
from test_offline import SCHEMAS, conforms

import jsonmode
from jsonmode import Attempt, AttemptsExhaustedError, JsonMode

PERSON = SCHEMAS[0]


def client(server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def chat(server: Any, schema: object | None, seed: int, **options: Any) -> Any:
    extra: dict[str, Any] = {"seed": seed}
    if schema is not None:
        extra["vllm_xargs"] = {"json_schema": json.dumps(schema)}
    return client(server).chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Reply with JSON."}],
        max_tokens=options.pop("max_tokens", 600),
        temperature=1.0,
        extra_body=extra,
        **options,
    )


def test_concurrent_constrained_and_plain_requests(server: Any) -> None:
    jobs = [(schema, seed) for seed, schema in enumerate(SCHEMAS * 2)]
    jobs += [(None, 100 + seed) for seed in range(6)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        replies = list(pool.map(lambda job: chat(server, *job), jobs))
    for (schema, _), reply in zip(jobs, replies, strict=True):
        choice = reply.choices[0]
        if schema is None:
            assert choice.message.content  # noise, untouched
            continue
        assert choice.finish_reason == "stop", choice.message.content
        conforms(choice.message.content, schema)


def test_completions_endpoint_too(server: Any) -> None:
    reply = client(server).completions.create(
        model="tiny",
        prompt="JSON:",
        max_tokens=200,
        extra_body={"vllm_xargs": {"json_schema": json.dumps(SCHEMAS[1])}, "seed": 3},
    )
    conforms(reply.choices[0].text, SCHEMAS[1])


def test_a_bad_schema_is_a_400_and_the_server_carries_on(server: Any) -> None:
    for bad in ('{"type": "nonsense"}', '{"$ref": "http://example.com/x.json"}', "{"):
        with pytest.raises(openai.BadRequestError, match="json_schema"):
            client(server).chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "x"}],
                extra_body={"vllm_xargs": {"json_schema": bad}},
            )
    with pytest.raises(openai.BadRequestError, match="structured outputs"):
        client(server).chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "x"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "p", "schema": PERSON},
            },
            extra_body={"vllm_xargs": {"json_schema": json.dumps(PERSON)}},
        )
    conforms(chat(server, SCHEMAS[2], 9).choices[0].message.content, SCHEMAS[2])


# -- the native tier: jsonmode's façade against vLLM's own structured outputs ------------


@pytest.mark.parametrize(
    ("model", "processor"),
    [("hosted_vllm/tiny", False), ("openai/tiny", False), ("hosted_vllm/tiny", True)],
)
def test_native_tier_is_honoured_on_the_first_attempt(
    server: Any, model: str, processor: bool
) -> None:
    # processor=False: vLLM's own structured outputs (response_format);
    # True: jsonmode's processor on the server (vllm_xargs)
    jm = JsonMode(
        model,
        vllm_processor=processor,
        api_base=server.base_url,
        api_key="unused",
        tier="native",
        mode="strict",
        max_attempts=1,
        max_tokens=600,
        temperature=1.0,
    )
    assert jm.tier == "native"
    for seed, schema in enumerate(SCHEMAS):
        attempts = _attempts(jm, f"Reply with JSON ({seed}).", schema)
        assert len(attempts) == 1
        (attempt,) = attempts
        jsonschema.validate(attempt.value, schema)  # format is not asserted here
        if attempt.ok:
            continue
        # vLLM's own backends write ``format: date`` from a per-field pattern: day 31 of
        # any month passes it ("7337-11-31"). jsonmode's strict check catches that, and
        # nothing else may fail: the schema did travel and was obeyed otherwise.
        # jsonmode's processor writes only real dates.
        assert not processor, attempt
        assert attempt.outcome == "schema_violation", attempt
        assert {issue.keyword for issue in attempt.issues} == {"format"}, attempt.issues


def _attempts(jm: JsonMode, prompt: str, schema: Any) -> tuple[Attempt, ...]:
    """The attempts of one run, whether it conformed or not (the tier is checked)."""
    try:
        result = jm.run(prompt, schema)
    except AttemptsExhaustedError as error:
        return error.attempts
    assert result.tier == "native"
    return result.attempts


def test_a_field_vllm_ignores_would_be_caught(server: Any) -> None:
    # The native tier's guarantee rests on vLLM reading the field the schema travels
    # in. vLLM answers HTTP 200 to a field it no longer reads (guided_json since 0.12):
    # such a request's text is this model's noise, so the first-attempt test above
    # fails for any field the capability table gets wrong.
    reply = client(server).chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Reply with JSON."}],
        max_tokens=60,
        extra_body={"guided_json": PERSON, "seed": 1},
    )
    text = reply.choices[0].message.content
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


CITY = {
    "type": "object",
    "properties": {"city": {"enum": ["Oslo", "Rome"]}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TZ = {
    "type": "object",
    "properties": {"tz": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    "required": ["tz"],
    "additionalProperties": False,
}


def test_a_structural_tag_gives_exactly_one_conforming_call(server: Any) -> None:
    """The processor's ``structural_tag`` argument over HTTP (``vllm_xargs``; issue 41;
    the processor-level tests are in test_structural_tag.py, this one shares this
    module's server): ``at_least_one`` and ``stop_after_first`` make the reply exactly
    one call of one of two tools; the random model's reply is that, and stops."""
    tools = {"get_weather": CITY, "get_time": TZ}
    spec = {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": ["<tool_call>"],
            "tags": [
                {
                    "type": "tag",
                    "begin": f'<tool_call>\n{{"name": "{name}", "arguments": ',
                    "content": {"type": "json_schema", "json_schema": schema},
                    "end": "}\n</tool_call>",
                }
                for name, schema in tools.items()
            ],
            "at_least_one": True,
            "stop_after_first": True,
        },
    }
    compiled = jsonmode.compile_structural_tag(spec)
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)
    pattern = re.compile(r'<tool_call>\n\{"name": "(\w+)", "arguments": (.*)\}\n</tool_call>', re.S)
    for seed in range(3):
        reply = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Call a tool."}],
            max_tokens=400,
            temperature=1.0,
            extra_body={"seed": seed, "vllm_xargs": {"structural_tag": json.dumps(spec)}},
        )
        choice = reply.choices[0]
        text = choice.message.content or ""
        assert choice.finish_reason == "stop", (choice.finish_reason, text)
        assert compiled.accepts(text), text
        found = pattern.fullmatch(text)
        assert found is not None, text
        jsonschema.validate(json.loads(found.group(2)), tools[found.group(1)])
    bad = json.loads(json.dumps(spec))
    bad["format"]["tags"][1]["content"]["type"] = "nope"
    with pytest.raises(openai.BadRequestError, match=r"\$\.format\.tags\[1\]\.content\.type"):
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Call a tool."}],
            max_tokens=5,
            extra_body={"vllm_xargs": {"structural_tag": json.dumps(bad)}},
        )


def test_a_thinking_model_thinks_closes_and_answers_over_http(server: Any) -> None:
    """The reasoning gate over HTTP (issue 41): ``reasoning_end`` and
    ``reasoning_max_tokens`` beside ``json_schema`` in ``vllm_xargs``; the random model's
    reply is thinking (free, no marker in it), the marker (its text spelled in ordinary
    tokens here, forced once the cap is reached), then a conforming document, and it
    stops."""
    for seed in range(3):
        reply = client(server).chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Think, then reply with JSON."}],
            max_tokens=400,
            temperature=1.0,
            extra_body={
                "seed": seed,
                "vllm_xargs": {
                    "json_schema": json.dumps(PERSON),
                    "reasoning_end": "</think>",
                    "reasoning_max_tokens": 12,
                },
            },
        )
        choice = reply.choices[0]
        text = choice.message.content or ""
        _thinking, marker, document = text.partition("</think>")
        assert marker, text
        assert choice.finish_reason == "stop", text
        conforms(document, PERSON)
        assert reply.usage.completion_tokens <= 12 + len("</think>") + len(document.encode()) + 1
