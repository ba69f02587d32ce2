"""Reading a chat completions request: the body's JSON → a :class:`Call`.

Everything a request may get wrong is found here, before the upstream is touched, and
answered with a :class:`~jsonmode.serve.errors.ServeError` (400) whose ``param`` is the
JSON path of the problem (``messages[2].role``, ``response_format.json_schema.schema``,
``response_format.json_schema.schema at $.properties.a``).

What a request asks for:

    response_format {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
                                        → the reply's content conforms to ``schema``
    response_format {"type": "json_object"}   → the content is a JSON object
    response_format {"type": "text"} or none  → no structure: proxied unchanged
    tools with "strict": true           → the calls' arguments conform (jsonmode.serve.tools)

jsonmode's per-request options ride in the extension field ``"jsonmode"`` (the
``openai`` clients send it with ``extra_body={"jsonmode": {...}}``):
``{"mode": "strict" | "repair", "max_attempts": N, "reasoning": "auto" | "off"}``;
``max_attempts`` is capped by the server's ``max_attempts_cap``. Every other field of
the body (``temperature``, ``max_tokens``, ``seed``, ``stop``, ``tools`` ...) goes to the
upstream as it came.

Cost: one pass over the body's top level; the schema is read by
:meth:`jsonmode.Schema.of` (bounded: the body is at most the server's
``max_body_bytes``, and the schema reader has its own nesting and size limits). A
schema never makes the server read a file or touch the network (``$ref`` stays inside
the document).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonmode.errors import SchemaError
from jsonmode.repair.parse import MODES, Mode
from jsonmode.schema import Schema
from jsonmode.serve.config import ServeConfig
from jsonmode.serve.errors import ServeError

__all__ = ["Call", "Kind", "Options", "bad", "parse_body", "read_chat", "read_options"]

Kind = Literal["json_schema", "json_object", "tool"]
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

#: Body fields the server reads itself; every other field goes upstream as it came.
OWN_FIELDS = frozenset(
    {"model", "messages", "response_format", "stream", "stream_options", "jsonmode"}
)


@dataclass(frozen=True)
class Options:
    """jsonmode's options for one request (the server's defaults, or the request's
    ``jsonmode`` field, capped)."""

    mode: Mode
    max_attempts: int
    reasoning: Literal["auto"] | None = "auto"


@dataclass(frozen=True)
class Call:
    """One chat request, read and checked.

    Attributes:
        model: the model the client named (echoed in the reply).
        messages: the chat messages, as sent.
        schema: the JSON Schema the reply must conform to (None: no structure).
        schema_name: the schema's name (``json_schema.name``, the tool's name).
        kind: what carries the structure (None: nothing, proxied).
        params: every other body field, for the upstream.
        stream, include_usage: a streamed reply; its last chunk carries ``usage``.
        options: jsonmode's options for this request.
    """

    model: str
    messages: tuple[dict[str, Any], ...]
    schema: Any
    schema_name: str | None
    kind: Kind | None
    params: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    include_usage: bool = False
    options: Options = Options("repair", 3)

    @property
    def structured(self) -> bool:
        return self.kind is not None


def bad(message: str, param: str | None, *, code: str = "invalid_value") -> ServeError:
    """A 400 for the request's field at ``param``."""
    return ServeError(400, message, param=param, code=code)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object.

    Raises:
        ServeError: 400 when it is not UTF-8 JSON, or not an object.
    """
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise bad(f"the request body is not JSON: {exc}", None, code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, not {_kind(body)}", None)
    return body


def read_options(value: Any, config: ServeConfig, param: str = "jsonmode") -> Options:
    """jsonmode's per-request options from the ``jsonmode`` field (None: defaults).

    Raises:
        ServeError: 400 for a field that is not an object, an unknown key, a bad mode,
            attempts that are not a positive integer or a bad reasoning setting.
    """
    mode, attempts = config.mode, config.max_attempts
    reasoning: Literal["auto"] | None = "auto"
    if value is None:
        return Options(mode, attempts, reasoning)
    if not isinstance(value, dict):
        raise bad(f"{param} must be an object, not {_kind(value)}", param)
    for key in value:
        if key not in ("mode", "max_attempts", "reasoning"):
            raise bad(
                f"unknown option {key!r} (known: mode, max_attempts, reasoning)",
                f"{param}.{key}",
                code="unknown_parameter",
            )
    if "mode" in value:
        if value["mode"] not in MODES:
            raise bad(
                f"mode must be one of {', '.join(MODES)}, not {value['mode']!r}", f"{param}.mode"
            )
        mode = value["mode"]
    if "max_attempts" in value:
        given = value["max_attempts"]
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise bad(
                f"max_attempts must be a positive integer, not {given!r}", f"{param}.max_attempts"
            )
        attempts = min(given, config.max_attempts_cap)
    if "reasoning" in value:
        if value["reasoning"] not in ("auto", "off", None):
            raise bad(
                f"reasoning must be 'auto' or 'off', not {value['reasoning']!r}",
                f"{param}.reasoning",
            )
        reasoning = "auto" if value["reasoning"] == "auto" else None
    return Options(mode, attempts, reasoning)


def read_schema(schema: Any, param: str) -> Any:
    """``schema`` checked by jsonmode's schema reader (the value itself is returned).

    Raises:
        ServeError: 400 naming ``param`` and the path inside the schema, for a schema
            that is not valid JSON Schema or that jsonmode cannot use.
    """
    if not isinstance(schema, (dict, bool)):
        raise bad(f"a JSON Schema must be an object, not {_kind(schema)}", param)
    try:
        Schema.of(schema)
    except SchemaError as exc:
        where = f"{param} at {exc.schema_path}" if exc.schema_path else param
        raise bad(f"the schema cannot be used: {exc}", where, code="invalid_schema") from None
    return schema


def read_messages(value: Any, param: str = "messages") -> tuple[dict[str, Any], ...]:
    """The chat messages, each an object with a known role.

    Raises:
        ServeError: 400 naming the message and field at fault.
    """
    if not isinstance(value, list) or not value:
        raise bad(f"{param} must be a non-empty array of messages", param)
    for index, message in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(message, dict):
            raise bad(f"a message must be an object, not {_kind(message)}", where)
        role = message.get("role")
        if role not in ROLES:
            raise bad(f"unknown role {role!r} (one of {', '.join(sorted(ROLES))})", where + ".role")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise bad(
                f"content must be a string or an array of parts, not {_kind(content)}",
                where + ".content",
            )
    return tuple(value)


def read_chat(body: Mapping[str, Any], config: ServeConfig) -> Call:
    """The :class:`Call` a chat completions body asks for.

    Raises:
        ServeError: 400 for anything the request gets wrong (see the module docstring).
    """
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model must be a non-empty string", "model")
    messages = read_messages(body.get("messages"))
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise bad(f"stream must be a boolean, not {_kind(stream)}", "stream")
    stream_options = body.get("stream_options")
    include_usage = False
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise bad("stream_options must be an object", "stream_options")
        include_usage = stream_options.get("include_usage", False) is True
    options = read_options(body.get("jsonmode"), config)
    schema, name, kind = _structure(body.get("response_format"))
    params = {key: value for key, value in body.items() if key not in OWN_FIELDS}
    if kind is not None and params.get("n", 1) not in (1, None):
        raise bad("n must be 1 for a structured reply", "n", code="unsupported_value")
    return Call(model, messages, schema, name, kind, params, stream, include_usage, options)


def _structure(value: Any) -> tuple[Any, str | None, Kind | None]:
    """(schema, name, kind) of ``response_format``."""
    param = "response_format"
    if value is None:
        return None, None, None
    if not isinstance(value, dict):
        raise bad(f"{param} must be an object, not {_kind(value)}", param)
    kind = value.get("type")
    if kind == "text":
        return None, None, None
    if kind == "json_object":
        return {"type": "object"}, "json_object", "json_object"
    if kind != "json_schema":
        raise bad(
            f"{param}.type must be text, json_object or json_schema, not {kind!r}", param + ".type"
        )
    inner = value.get("json_schema")
    if not isinstance(inner, dict):
        raise bad(f"{param}.json_schema must be an object", param + ".json_schema")
    name = inner.get("name", "response")
    if not isinstance(name, str) or not name or len(name) > 64:
        raise bad(
            "json_schema.name must be a string of 1 to 64 characters", param + ".json_schema.name"
        )
    if "schema" not in inner:
        raise bad("json_schema.schema is missing", param + ".json_schema.schema")
    schema = read_schema(inner["schema"], param + ".json_schema.schema")
    return schema, name, "json_schema"


def _kind(value: Any) -> str:
    """The JSON kind of ``value``, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
