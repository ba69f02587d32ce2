"""``@jsonmode.structured``: prompts from docstrings or bodies, sync and async, the
façade's values and errors, and a wrapper that looks like the function it wraps."""

import asyncio
import inspect
from typing import Literal

import pytest
from pydantic import BaseModel, Field

import jsonmode
from jsonmode import AttemptsExhaustedError, JsonMode, UsageError
from jsonmode.backends import ScriptedBackend

GOOD = '{"name": "Ada Lovelace", "age": 36}'


class Person(BaseModel):
    name: str
    age: int = Field(ge=0)


def user_prompt(backend: ScriptedBackend, index: int = 0) -> str:
    """The caller's own text in one recorded request (the last message)."""
    return str(backend.requests[index].messages[-1]["content"])


def test_docstring_is_the_prompt_formatted_with_the_arguments_and_defaults():
    backend = ScriptedBackend([GOOD])

    @jsonmode.structured(backend=backend)
    def extract(text: str, language: str = "English") -> Person:
        """Extract the person from this {language} text: {text}"""

    person = extract("Ada Lovelace, 36")

    assert person == Person(name="Ada Lovelace", age=36)
    assert user_prompt(backend) == "Extract the person from this English text: Ada Lovelace, 36"


def test_the_schema_reaches_the_model_through_the_facade():
    backend = ScriptedBackend([GOOD])

    @jsonmode.structured(backend=backend)
    def extract(text: str) -> Person:
        """{text}"""

    extract("Ada")

    system = str(backend.requests[0].messages[0]["content"])
    assert jsonmode.Schema.of(Person).prompt_form in system


def test_docstring_template_is_dedented_and_keeps_literal_braces():
    backend = ScriptedBackend([GOOD])

    @jsonmode.structured(backend=backend)
    def extract(text: str) -> Person:
        """
        Reply like {{"name": ..., "age": ...}}.
            Text: {text!r}
        """

    extract("Ada")

    assert user_prompt(backend) == 'Reply like {"name": ..., "age": ...}.\n    Text: \'Ada\''


def test_docstring_may_reach_into_arguments():
    backend = ScriptedBackend([GOOD])

    class Doc(BaseModel):
        title: str
        lines: list[str]

    @jsonmode.structured(backend=backend)
    def extract(doc: Doc) -> Person:
        """{doc.title}: {doc.lines[1]}"""

    extract(Doc(title="Notes", lines=["skip", "Ada, 36"]))

    assert user_prompt(backend) == "Notes: Ada, 36"


def test_a_body_that_returns_a_string_supplies_the_prompt():
    backend = ScriptedBackend([GOOD])

    @jsonmode.structured(backend=backend)
    def extract(text: str) -> Person:
        """Documentation only: braces like {these} are not placeholders here."""
        return f"Find the person in: {text.upper()}"

    assert extract("ada, 36") == Person(name="Ada Lovelace", age=36)
    assert user_prompt(backend) == "Find the person in: ADA, 36"


def test_a_body_may_return_chat_messages():
    backend = ScriptedBackend([GOOD])

    @jsonmode.structured(backend=backend)
    def extract(text: str) -> Person:
        return [
            {"role": "system", "content": "You read names carefully."},
            {"role": "user", "content": text},
        ]

    extract("Ada, 36")

    messages = backend.requests[0].messages
    assert str(messages[0]["content"]).startswith("You read names carefully.")
    assert messages[-1] == {"role": "user", "content": "Ada, 36"}


def test_python_types_as_return_annotations():
    backend = ScriptedBackend(['["a", "b"]', '"high"'])

    @jsonmode.structured(backend=backend)
    def tags(text: str) -> list[str]:
        """Tags for {text}"""

    @jsonmode.structured(backend=backend)
    def priority(text: str) -> Literal["low", "high"]:
        """Priority of {text}"""

    assert tags("x") == ["a", "b"]
    assert priority("x") == "high"


def test_repair_mode_and_options_reach_the_facade():
    backend = ScriptedBackend(["```json\n{'name': 'Ada Lovelace', 'age': '36',}\n```"])

    @jsonmode.structured(backend=backend, mode="repair", max_attempts=1)
    def extract(text: str) -> Person:
        """{text}"""

    assert extract("Ada") == Person(name="Ada Lovelace", age=36)


def test_strict_mode_raises_the_facades_typed_error_with_every_attempt():
    backend = ScriptedBackend(['{"name": "Ada"}', '{"name": "Ada", "age": -1}'])

    @jsonmode.structured(backend=backend, max_attempts=2)
    def extract(text: str) -> Person:
        """{text}"""

    with pytest.raises(AttemptsExhaustedError) as caught:
        extract("Ada")

    assert [attempt.outcome for attempt in caught.value.attempts] == [
        "schema_violation",
        "schema_violation",
    ]
    assert "Attempt 1 of 2" in user_prompt(backend, 1)


def test_few_shot_examples_go_with_every_call():
    backend = ScriptedBackend([GOOD])
    shot = ("Grace Hopper, 85", {"name": "Grace Hopper", "age": 85})

    @jsonmode.structured(backend=backend, examples=[shot])
    def extract(text: str) -> Person:
        """{text}"""

    extract("Ada")

    contents = [message["content"] for message in backend.requests[0].messages]
    assert "Grace Hopper, 85" in contents


def test_a_shared_jsonmode_is_used_as_is():
    backend = ScriptedBackend([GOOD])
    jm = JsonMode(backend, mode="repair")

    @jsonmode.structured(backend=jm)
    def extract(text: str) -> Person:
        """{text}"""

    assert extract("Ada").age == 36
    with pytest.raises(UsageError):
        jsonmode.structured(backend=jm, max_attempts=2)


def test_methods_format_self_in_the_docstring():
    backend = ScriptedBackend([GOOD])

    class Extractor:
        language = "French"

        @jsonmode.structured(backend=backend)
        def extract(self, text: str) -> Person:
            """Read this {self.language} text: {text}"""

    Extractor().extract("Ada")

    assert user_prompt(backend) == "Read this French text: Ada"


def test_async_functions_get_an_async_wrapper():
    backend = ScriptedBackend([GOOD])

    @jsonmode.structured(backend=backend)
    async def extract(text: str) -> Person:
        """Async: {text}"""

    assert inspect.iscoroutinefunction(extract)
    assert asyncio.run(extract("Ada")) == Person(name="Ada Lovelace", age=36)
    assert user_prompt(backend) == "Async: Ada"


def test_async_body_may_await_before_returning_its_prompt():
    seen: list[str] = []

    async def model(messages: list[dict[str, str]]) -> str:
        seen.append(messages[-1]["content"])
        return GOOD

    @jsonmode.structured(backend=model)
    async def extract(text: str) -> Person:
        await asyncio.sleep(0)
        return f"awaited {text}"

    assert asyncio.run(extract("Ada")).name == "Ada Lovelace"
    assert seen == ["awaited Ada"]


def test_async_functions_raise_the_facades_errors():
    backend = ScriptedBackend(["not json"])

    @jsonmode.structured(backend=backend, max_attempts=1)
    async def extract(text: str) -> Person:
        """{text}"""

    with pytest.raises(AttemptsExhaustedError) as caught:
        asyncio.run(extract("Ada"))
    assert caught.value.attempts[0].outcome == "invalid_json"


def test_the_wrapper_keeps_name_docstring_annotations_and_signature():
    def extract(text: str, *, language: str = "en") -> Person:
        """Extract from {text} in {language}."""

    wrapped = jsonmode.structured(backend=ScriptedBackend([]))(extract)

    assert wrapped.__name__ == "extract"
    assert wrapped.__qualname__ == extract.__qualname__
    assert wrapped.__doc__ == extract.__doc__
    assert wrapped.__module__ == extract.__module__
    assert wrapped.__annotations__ == extract.__annotations__
    assert inspect.signature(wrapped) == inspect.signature(extract)
    assert not inspect.iscoroutinefunction(wrapped)


def test_wrong_arguments_fail_like_the_function_itself():
    backend = ScriptedBackend([])

    @jsonmode.structured(backend=backend)
    def extract(text: str) -> Person:
        """{text}"""

    with pytest.raises(TypeError, match="text"):
        extract()  # type: ignore[call-arg]
    assert backend.requests == []


def test_forward_references_resolve_on_the_first_call():
    backend = ScriptedBackend(['{"city": "London"}'])

    @jsonmode.structured(backend=backend)
    def locate(text: str) -> "Place":
        """{text}"""

    assert locate("Ada lived in London") == Place(city="London")


class Place(BaseModel):
    city: str


# -- misuse, reported as UsageError ------------------------------------------------


def test_a_missing_return_annotation_fails_at_decoration():
    with pytest.raises(UsageError, match="return annotation"):

        @jsonmode.structured(backend=ScriptedBackend([]))
        def extract(text: str):  # type: ignore[no-untyped-def]
            """{text}"""


def test_a_none_return_annotation_fails_at_decoration():
    with pytest.raises(UsageError, match="None"):

        @jsonmode.structured(backend=ScriptedBackend([]))
        def extract(text: str) -> None:
            """{text}"""


def test_an_unknown_placeholder_fails_at_decoration_naming_the_parameters():
    with pytest.raises(UsageError, match=r"'txt' is not a parameter \(parameters: text\)"):

        @jsonmode.structured(backend=ScriptedBackend([]))
        def extract(text: str) -> Person:
            """Extract from {txt}"""


def test_a_positional_placeholder_fails_at_decoration():
    with pytest.raises(UsageError, match="positional placeholder"):

        @jsonmode.structured(backend=ScriptedBackend([]))
        def extract(text: str) -> Person:
            """Extract from {}"""


def test_json_braces_in_a_template_are_reported_with_the_escape_hint():
    with pytest.raises(UsageError, match=r"write \{\{ and \}\} for literal braces"):

        @jsonmode.structured(backend=ScriptedBackend([]))
        def extract(text: str) -> Person:
            """Reply like {"name": ...}"""


def test_a_broken_template_fails_at_decoration():
    with pytest.raises(UsageError, match="not a valid format template"):

        @jsonmode.structured(backend=ScriptedBackend([]))
        def extract(text: str) -> Person:
            """Close the object with a single }"""


def test_a_placeholder_typo_in_a_body_function_fails_when_the_docstring_is_used():
    backend = ScriptedBackend([])

    @jsonmode.structured(backend=backend)
    def extract(text: str, use_docstring: bool) -> Person:
        """Extract from {txt}"""
        if not use_docstring:
            return text
        return None

    with pytest.raises(UsageError, match="'txt' is not a parameter"):
        extract("Ada", True)
    assert backend.requests == []


def test_a_body_returning_something_else_fails_at_the_call():
    backend = ScriptedBackend([])

    @jsonmode.structured(backend=backend)
    def extract(text: str) -> Person:
        return 42  # type: ignore[return-value]

    with pytest.raises(UsageError, match="returned int"):
        extract("Ada")
    assert backend.requests == []


def test_no_docstring_and_no_prompt_fails_at_the_call():
    @jsonmode.structured(backend=ScriptedBackend([]))
    def extract(text: str) -> Person:
        pass  # type: ignore[empty-body]

    with pytest.raises(UsageError, match="no docstring"):
        extract("Ada")


def test_a_formatting_error_at_the_call_is_a_usage_error():
    @jsonmode.structured(backend=ScriptedBackend([]))
    def extract(text: str) -> Person:
        """{text.missing_attribute}"""

    with pytest.raises(UsageError, match="cannot format the docstring"):
        extract("Ada")


def test_bad_facade_arguments_fail_at_decoration():
    with pytest.raises(UsageError, match="mode"):
        jsonmode.structured(backend=ScriptedBackend([]), mode="lenient")  # type: ignore[arg-type]


def test_decorating_without_arguments_is_explained():
    def extract(text: str) -> Person:
        """{text}"""

    decorator = jsonmode.structured(extract)
    with pytest.raises(UsageError, match="with its arguments"):
        decorator("Ada")  # type: ignore[arg-type]


def test_generators_are_refused():
    with pytest.raises(UsageError, match="generator"):

        @jsonmode.structured(backend=ScriptedBackend([]))
        def extract(text: str) -> Person:  # type: ignore[misc]
            yield text
