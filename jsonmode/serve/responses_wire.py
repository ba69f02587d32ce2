"""Reading a ``POST /v1/responses`` body: the Responses API's fields → a chat body.

A Responses request is translated into a chat completions body (:func:`chat_body`) and
read by the chat route's own parser, so both routes share every check (schema bounds,
the ``jsonmode`` extension field, sampling fields) and every error shape; an error's
``param`` names the field of the *Responses* body (``text.format.schema``, not
``response_format.json_schema.schema``).

Translation (what a client sends → what the upstream gets):

- ``input``: a string (one user message) or a list of items: messages (``role`` user,
  system, developer or assistant; ``content`` a string or ``input_text`` /
  ``output_text`` / ``refusal`` / ``input_image`` parts), ``function_call`` and
  ``function_call_output`` items (an assistant tool call and its result); ``reasoning``
  items (an earlier reply's thinking, replayed) are dropped. ``instructions``
  becomes a first system message; ``developer`` is sent as ``system`` (every
  OpenAI-compatible upstream knows it).
- ``text.format``: ``json_schema`` (``name``, ``schema``, ``strict``, ``description``) →
  ``response_format`` ``json_schema``; ``json_object`` → ``json_object``; ``text`` or none →
  no structure (the request is proxied and its answer converted back).
- ``temperature``, ``top_p`` as they are; ``max_output_tokens`` → ``max_tokens``;
  ``reasoning.effort`` → ``reasoning_effort``; ``user`` / ``safety_identifier`` → ``user``.
- Fields that describe storage or presentation and change nothing in the answer
  (``store``, ``metadata``, ``truncation``, ``include``, ``service_tier``, ...) are accepted
  and ignored. Fields the server cannot honour without state or tools
  (``previous_response_id``, ``conversation``, ``tools``, ``background``, ``prompt``) are a
  400 naming the field when set (null, false or empty is as if absent); an unknown field
  is a 400 too (as OpenAI answers).

Cost: one pass over the body; nothing is copied but the message list. Pure functions,
thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonmode.serve.errors import ServeError

__all__ = ["chat_body", "responses_param"]

#: Fields accepted and ignored: storage, presentation and caching hints that do not
#: change the answer of a stateless server.
IGNORED = frozenset(
    {
        "store",
        "metadata",
        "truncation",
        "include",
        "service_tier",
        "parallel_tool_calls",
        "prompt_cache_key",
        "prompt_cache_retention",
        "stream_options",
        "top_logprobs",
        "max_tool_calls",
    }
)
#: Fields that need state or tools this server does not keep: a 400 when set.
UNSUPPORTED = {
    "previous_response_id": "the server keeps no responses; send the whole conversation in input",
    "conversation": "the server keeps no conversations; send the whole conversation in input",
    "tools": "tools are served on /v1/chat/completions (strict function tools)",
    "prompt": "stored prompts are not available; send the instructions and input",
    "background": "background responses need stored state; call without background",
}
HANDLED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "text",
        "temperature",
        "top_p",
        "max_output_tokens",
        "reasoning",
        "user",
        "safety_identifier",
        "stream",
        "tool_choice",
        "jsonmode",
    }
)
#: Roles of an input message, and what each is sent upstream as.
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
#: Path prefixes of the chat body, and the Responses field each came from.
PARAM_NAMES = (
    ("response_format.json_schema.schema", "text.format.schema"),
    ("response_format.json_schema.name", "text.format.name"),
    ("response_format.json_schema.strict", "text.format.strict"),
    ("response_format.json_schema", "text.format"),
    ("response_format", "text.format"),
    ("max_tokens", "max_output_tokens"),
    ("reasoning_effort", "reasoning.effort"),
    ("messages", "input"),
)


def _bad(message: str, param: str) -> ServeError:
    return ServeError(400, message, param=param, code="invalid_value")


def chat_body(body: object) -> dict[str, Any]:
    """The chat completions body that asks what the Responses ``body`` asks.

    Cost: linear in the body. Never mutates ``body`` (contents are shared, not copied).

    Raises:
        ServeError: 400 with ``param`` the Responses field at fault (an unknown or
            unsupported field, a malformed input item or text format).
    """
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object", "")
    for name in body:
        if name in HANDLED or name in IGNORED:
            continue
        if name in UNSUPPORTED:
            if body[name] in (None, False, [], {}, ""):  # not asked for: as if absent
                continue
            raise _bad(f"{name} is not supported by this server: {UNSUPPORTED[name]}", name)
        raise ServeError(400, f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    out: dict[str, Any] = {"model": body.get("model")}
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise _bad("instructions must be a string", "instructions")
        messages.append({"role": "system", "content": instructions})
    if "input" not in body:
        raise _bad("input is required", "input")
    messages += _messages(body["input"])
    out["messages"] = messages
    fmt = _format(body.get("text"))
    if fmt is not None:
        out["response_format"] = fmt
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            out[name] = body[name]
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise _bad("reasoning must be an object", "reasoning")
        if reasoning.get("effort") is not None:
            out["reasoning_effort"] = reasoning["effort"]
    user = body.get("user", body.get("safety_identifier"))
    if user is not None:
        out["user"] = user
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise _bad("tool_choice needs tools, which this route does not take", "tool_choice")
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            raise _bad("stream must be a boolean", "stream")
        out["stream"] = stream
        if stream:
            out["stream_options"] = {"include_usage": True}
    if "jsonmode" in body:
        out["jsonmode"] = body["jsonmode"]
    return out


def _messages(value: object) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _bad("input must be a string or a non-empty list of input items", "input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        at = f"input[{index}]"
        if not isinstance(item, dict):
            raise _bad("an input item must be an object", at)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ROLES:
                raise _bad(f"role must be one of {', '.join(ROLES)}, not {role!r}", f"{at}.role")
            messages.append({"role": ROLES[role], "content": _content(item.get("content"), at)})
        elif kind == "function_call":
            call = {
                "id": _text(item, "call_id", at),
                "type": "function",
                "function": {
                    "name": _text(item, "name", at),
                    "arguments": _text(item, "arguments", at),
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str):
                output = _content(output, at)
            messages.append(
                {"role": "tool", "tool_call_id": _text(item, "call_id", at), "content": output}
            )
        elif kind == "reasoning":
            continue  # an earlier reply's thinking, replayed: not for the upstream
        else:
            raise _bad(
                f"input items of type {kind!r} are not supported (messages, function_call, "
                "function_call_output and reasoning are)",
                f"{at}.type",
            )
    return messages


def _text(item: Mapping[str, Any], name: str, at: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise _bad(f"{name} must be a string", f"{at}.{name}")
    return value


def _content(value: object, at: str) -> str | list[dict[str, Any]]:
    """A message's content as chat takes it: a string, or text and image parts."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _bad("content must be a string or a list of content parts", f"{at}.content")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(value):
        where = f"{at}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text") and isinstance(part, dict):
            parts.append({"type": "text", "text": _text(part, "text", where)})
        elif kind == "refusal" and isinstance(part, dict):
            parts.append({"type": "text", "text": _text(part, "refusal", where)})
        elif kind == "input_image" and isinstance(part, dict):
            image: dict[str, Any] = {"url": _text(part, "image_url", where)}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise _bad(
                f"content parts of type {kind!r} are not supported "
                "(input_text, output_text, refusal and input_image are)",
                f"{where}.type",
            )
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _format(text: object) -> dict[str, Any] | None:
    """``text.format`` as chat's ``response_format`` (None: no structure asked)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("text must be an object", "text")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise _bad("text.format must be an object", "text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        spec: dict[str, Any] = {"name": fmt.get("name"), "schema": fmt.get("schema")}
        for name in ("strict", "description"):
            if fmt.get(name) is not None:
                spec[name] = fmt[name]
        return {"type": "json_schema", "json_schema": spec}
    raise _bad(
        f"text.format.type must be text, json_object or json_schema, not {kind!r}",
        "text.format.type",
    )


def responses_param(param: str | None) -> str | None:
    """The Responses field a chat body's ``param`` path came from."""
    if not param:
        return param
    for chat, responses in PARAM_NAMES:
        if param == chat or param.startswith((chat + ".", chat + "[", chat + " ")):
            return responses + param[len(chat) :]
    return param
