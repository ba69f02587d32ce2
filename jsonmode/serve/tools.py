"""Chat completions with ``tools`` marked ``"strict": true``: every call's arguments conform.

A function tool whose ``function.strict`` is true promises that the arguments of each
call to it conform to its ``function.parameters``. The server keeps that promise on any
upstream, two ways:

- **One strict function forced** (``tool_choice`` names it, or is ``"required"`` with it
  the only tool): the call goes through jsonmode's tiers like a ``json_schema`` request,
  with the function's parameters as the schema (:func:`run_forced`): constrained by
  jsonmode's processor on vLLM, native where the upstream takes a schema, else prompted
  with repair and re-ask. The upstream needs no tool calling; the function's name and
  description lead the messages, and the answer comes back as that function's call.
- **The model chooses** (``tool_choice`` ``"auto"``, absent, or several tools): the
  request goes upstream with its tools as the client gave them (OpenAI's own API and
  vLLM enforce ``strict`` themselves), and the reply is then checked here
  (:func:`run_loop`):

1. Every call to a strict tool has its arguments read by :func:`jsonmode.parse` against
   the tool's parameters, in the request's mode: ``repair`` fixes syntax slips and wrong
   types (every repair recorded in the reply's ``jsonmode.repairs``, its ``path``
   the call's: ``tool_calls[0].function.arguments.age``), ``strict`` repairs nothing. A
   repaired call's arguments are sent as compact JSON; an unrepaired one as the model
   wrote it. Calls to tools that are not strict pass unchecked.
2. A call to a function the request did not offer, or no call where ``tool_choice``
   asked for one (``"required"``, or a named function), does not conform either.
3. A reply that does not conform is re-asked with a new message list (the request's
   messages are never changed): the request's messages, the assistant's reply with its
   calls, and one ``tool`` message per call saying what was wrong with it (or that it was
   not run because another call was wrong), up to the request's ``max_attempts``.
4. After the last attempt: the same HTTP 422 ``jsonmode_nonconforming`` as any
   structured request, listing every attempt and its issues (paths
   ``tool_calls[i].function.arguments...``).

``usage`` sums every attempt. A reply with text and no calls is accepted where the
request let the model choose (``tool_choice`` ``"auto"`` or absent). The reply is an
ordinary ``chat.completion`` (or its chunks, for ``stream: true``: sent once the whole
message conforms) with the top-level ``jsonmode`` record: the tier that served a forced
call; ``native`` where the model chose (the tools went to the upstream's own tool
calling, then were checked here).

Upstream failures follow the chat route: the transport policy retries 429s, 5xx and
timeouts (``Retry-After`` honoured), then 429 (Retry-After kept), 502, 503, 504; an
upstream that refuses the request as sent (its 400) is passed on with its status.

Cost: one upstream call per attempt; validation is linear in the arguments and bounded
by :func:`jsonmode.parse`'s limits. Thread-safety: pure functions and one coroutine per
request; nothing is shared between requests.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonmode._text import clip
from jsonmode.errors import (
    AttemptsExhaustedError,
    BackendError,
    OutputError,
    OutputTruncatedError,
)
from jsonmode.records import Attempt, Issue, Outcome, Repair, Usage
from jsonmode.repair.parse import parse
from jsonmode.schema import Schema
from jsonmode.serve.chat import ChunkedReply, event
from jsonmode.serve.deferred import Deferred
from jsonmode.serve.errors import ServeError, from_jsonmode
from jsonmode.serve.upstream import (
    Upstream,
    jsonmode_record,
    repair_json,
    total_usage,
    usage_from,
    usage_json,
)
from jsonmode.serve.wire import Call, read_schema

__all__ = [
    "Checked",
    "ToolsOutcome",
    "ToolsRendering",
    "check_message",
    "forced_function",
    "has_strict_tools",
    "reask_messages",
    "run_forced",
    "run_loop",
    "run_tools",
    "strict_tools",
    "tools_reply",
]

#: Issues per call that a re-ask repeats to the model (the 422 lists them all).
MAX_REASK_ISSUES = 20
#: Characters of one issue's message that a re-ask repeats.
MAX_ISSUE_CHARS = 300

#: One upstream call: the messages → the upstream's ``chat.completion``, as JSON.
Complete = Callable[[tuple[dict[str, Any], ...]], Awaitable[dict[str, Any]]]


def strict_tools(params: Mapping[str, Any]) -> dict[str, Schema]:
    """The strict function tools of a request's fields: name → its parameters' schema.

    Raises:
        ServeError: 400 naming ``tools[i]...`` for a malformed tool list or a strict
            tool whose parameters jsonmode cannot use.
    """
    tools = params.get("tools")
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise ServeError(400, "tools must be an array", param="tools", code="invalid_value")
    found: dict[str, Schema] = {}
    for index, tool in enumerate(tools):
        at = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise ServeError(400, "a tool must be an object", param=at, code="invalid_value")
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, dict):
            continue
        if function.get("strict") is not True:
            continue
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise ServeError(
                400, "a function needs a name", param=f"{at}.function.name", code="invalid_value"
            )
        where = f"{at}.function.parameters"
        schema = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(schema, dict):
            raise ServeError(400, "parameters must be a JSON Schema object", param=where)
        read_schema(schema, where)  # under the route's deadline: a 400 naming the path
        found[name] = Schema.of(schema)  # read above: from the cache
    return found


def _offered(params: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in params.get("tools") or ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.add(function["name"])
    return names


def _required(params: Mapping[str, Any]) -> str | None:
    """What ``tool_choice`` demands: a function's name, ``"*"`` (any call) or None."""
    choice = params.get("tool_choice")
    if choice == "required":
        return "*"
    if isinstance(choice, dict):
        function = choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return str(function["name"])
    return None


@dataclass(frozen=True)
class Checked:
    """One upstream reply, checked.

    Attributes:
        message: the assistant message to send (repaired calls' arguments replaced).
        issues: every reason it does not conform (paths ``tool_calls[i]...``); empty: it does.
        by_call: the issues of each call, by its index (for the re-ask).
        repairs: every repair made, paths prefixed with the call.
    """

    message: dict[str, Any]
    issues: tuple[Issue, ...]
    by_call: dict[int, tuple[Issue, ...]]
    repairs: tuple[Repair, ...]


def check_message(
    message: Mapping[str, Any], params: Mapping[str, Any], strict: Mapping[str, Schema], mode: str
) -> Checked:
    """Check (and in ``repair`` mode repair) the tool calls of one assistant message.

    Never mutates ``message``. Cost: one :func:`jsonmode.parse` per strict call.
    """
    calls = message.get("tool_calls") or []
    offered = _offered(params)
    fixed: list[Any] = []
    by_call: dict[int, tuple[Issue, ...]] = {}
    repairs: list[Repair] = []
    for index, call in enumerate(calls if isinstance(calls, list) else []):
        at = f"tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            fixed.append(call)
            continue
        name = function.get("name")
        if name not in offered:
            by_call[index] = (Issue(f"{at}.function.name", "name", f"no tool is named {name!r}"),)
            fixed.append(call)
            continue
        schema = strict.get(name) if isinstance(name, str) else None
        if schema is None:
            fixed.append(call)
            continue
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        try:
            parsed = parse(text, schema, "repair" if mode == "repair" else "strict")
        except OutputError as exc:
            prefix = f"{at}.function.arguments"
            keyword = "truncated" if isinstance(exc, OutputTruncatedError) else "parse"
            found = exc.issues or (Issue("$", keyword, exc.message),)
            by_call[index] = tuple(
                Issue(prefix + issue.path.removeprefix("$"), issue.keyword, issue.message)
                for issue in found
            )
            fixed.append(call)
            continue
        if parsed.repairs:
            repairs += [
                Repair(
                    f"{at}.function.arguments{repair.path.removeprefix('$')}",
                    repair.kind,
                    repair.before,
                    repair.after,
                )
                for repair in parsed.repairs
            ]
            compact = json.dumps(parsed.data, ensure_ascii=False, separators=(",", ":"))
            call = {**call, "function": {**function, "arguments": compact}}
        fixed.append(call)
    issues = [issue for index in sorted(by_call) for issue in by_call[index]]
    demanded = _required(params)
    if demanded is not None:
        names = [
            call["function"].get("name")
            for call in fixed
            if isinstance(call, dict) and isinstance(call.get("function"), dict)
        ]
        if not names or (demanded != "*" and demanded not in names):
            wanted = "a tool call" if demanded == "*" else f"a call to {demanded!r}"
            issues.append(
                Issue("$", "tool_choice", f"tool_choice asks for {wanted}; none was made")
            )
    out = {**message, "tool_calls": fixed} if calls else dict(message)
    return Checked(out, tuple(issues), by_call, tuple(repairs))


def _feedback(issues: Sequence[Issue]) -> str:
    lines = ["Error: the arguments of this call do not conform to the function's parameters:"]
    lines += [
        f"- ${issue.path.split('.function.arguments', 1)[-1]} ({issue.keyword}): "
        f"{clip(issue.message, MAX_ISSUE_CHARS)}"
        for issue in issues[:MAX_REASK_ISSUES]
    ]
    if len(issues) > MAX_REASK_ISSUES:
        lines.append(f"- ... and {len(issues) - MAX_REASK_ISSUES} more")
    lines.append("The call was not run. Make the call again with corrected arguments.")
    return "\n".join(lines)


def reask_messages(
    messages: Sequence[dict[str, Any]], reply: Mapping[str, Any], checked: Checked, attempt: int
) -> tuple[dict[str, Any], ...]:
    """A new message list that shows the model its reply and what was wrong with it.

    Each call gets its ``tool`` message (OpenAI requires one per call id): its issues, or
    that it was not run because another call of the reply did not conform. A reply that
    made no call where one was required gets a user message saying so. ``messages`` and
    ``reply`` are not changed.
    """
    calls = [call for call in (reply.get("tool_calls") or []) if isinstance(call, dict)]
    assistant: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    if calls:
        assistant["tool_calls"] = calls
    out = [*messages, assistant]
    for index, call in enumerate(calls):
        issues = checked.by_call.get(index)
        text = (
            _feedback(issues)
            if issues
            else "Not run: another call in this reply did not conform. Make this call again too."
        )
        out.append({"role": "tool", "tool_call_id": str(call.get("id", "")), "content": text})
    general = [issue for issue in checked.issues if issue.keyword == "tool_choice"]
    if general or not calls:
        lines = [f"Attempt {attempt} did not conform."] + [issue.message for issue in general]
        out.append({"role": "user", "content": " ".join(lines)})
    return tuple(out)


@dataclass(frozen=True)
class ToolsOutcome:
    """What a request with strict tools produced: the upstream's completion with the
    conforming message, and the ``jsonmode`` record."""

    completion: dict[str, Any]
    mode: str
    attempts: int
    repairs: tuple[dict[str, Any], ...]
    usage: Usage | None
    outcomes: tuple[str, ...]
    tier: str = "native"

    @property
    def message(self) -> dict[str, Any]:
        return dict(self.completion["choices"][0]["message"])

    def record(self) -> dict[str, Any]:
        """The reply's top-level ``jsonmode`` object."""
        return jsonmode_record(self.tier, self.mode, self.attempts, self.repairs, self.outcomes)


def _message(completion: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    try:
        choice = completion["choices"][0]
        message = dict(choice["message"])
    except (KeyError, IndexError, TypeError):
        raise ServeError(
            502, "upstream: the reply is not a chat completion", type="upstream_error"
        ) from None
    return message, str(choice.get("finish_reason") or "stop")


async def run_loop(call: Call, complete: Complete) -> ToolsOutcome:
    """Ask, check, repair and re-ask until the calls conform (see the module docstring).

    Raises:
        ServeError: 400 for unusable strict tools, 422 when no attempt conforms, the
            upstream's failures as :func:`complete` raises them.
    """
    strict = strict_tools(call.params)
    mode, limit = call.options.mode, call.options.max_attempts
    messages = tuple(call.messages)
    attempts: list[Attempt] = []
    usages: list[Usage | None] = []
    for index in range(1, limit + 1):
        started = time.monotonic()
        completion = await complete(messages)
        latency = time.monotonic() - started
        usage = usage_from(completion.get("usage"))
        usages.append(usage)
        reply, finish = _message(completion)
        checked = check_message(reply, call.params, strict, mode)
        raw = json.dumps(reply.get("tool_calls") or reply.get("content") or "", ensure_ascii=False)
        if not checked.issues:
            attempts.append(Attempt(index, "valid", raw, repairs=checked.repairs, usage=usage))
            choices = [{**completion["choices"][0], "message": checked.message}]
            final = {**completion, "choices": choices}
            return ToolsOutcome(
                final,
                mode,
                index,
                tuple(repair_json(repair) for repair in checked.repairs),
                total_usage(usages),
                tuple(attempt.outcome for attempt in attempts),
            )
        outcome: Outcome = "truncated" if finish == "length" else _outcome(checked.issues)
        attempts.append(
            Attempt(
                index,
                outcome,
                raw,
                error=str(checked.issues[0]),
                issues=checked.issues,
                repairs=checked.repairs,
                latency_s=latency,
                usage=usage,
            )
        )
        messages = reask_messages(call.messages, reply, checked, index)
    error = AttemptsExhaustedError(
        f"no conforming tool call after {limit} attempt{'s' if limit != 1 else ''}",
        attempts=attempts,
    )
    outcomes = [attempt.outcome for attempt in attempts]
    top: dict[str, Any] = {"jsonmode": jsonmode_record("native", mode, len(attempts), (), outcomes)}
    total = total_usage(usages)
    if total is not None:
        top["usage"] = usage_json(total)
    raise from_jsonmode(error, top=top)


def _outcome(issues: Sequence[Issue]) -> Outcome:
    keywords = {issue.keyword for issue in issues}
    if "truncated" in keywords:
        return "truncated"
    return "invalid_json" if "parse" in keywords else "schema_violation"


async def run_tools(call: Call, upstream: Upstream) -> ToolsOutcome:
    """:func:`run_loop` over ``upstream``: each attempt is one non-streamed chat
    completions request with the request's own fields (tools, tool_choice, temperature
    ...) and the attempt's messages, sent with :meth:`Upstream.complete`, under the
    upstream's transport policy (429s, 5xx
    and timeouts retried, ``Retry-After`` honoured, within the server's limits).

    Raises:
        ServeError: see :func:`run_loop`; the upstream's 429/5xx/timeouts map to
            429/502/503/504 as the chat route's do.
    """

    function = forced_function(call.params)
    if function is not None:
        return await run_forced(call, upstream, function)

    async def once(messages: tuple[dict[str, Any], ...]) -> dict[str, Any]:
        body = {
            **call.params,
            "model": call.model,
            "messages": [dict(message) for message in messages],
            "stream": False,
        }
        reply: dict[str, Any] = await upstream.complete(body)
        return reply

    async def complete(messages: tuple[dict[str, Any], ...]) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = await upstream.transport.aretrying()(once, messages)
        except BackendError as exc:
            raise from_jsonmode(exc) from exc
        return reply

    return await run_loop(call, complete)


def forced_function(params: Mapping[str, Any]) -> dict[str, Any] | None:
    """The strict function a request forces (``tool_choice`` names it, or is
    ``"required"`` with it the only tool), or None: the model chooses."""
    tools = [tool for tool in params.get("tools") or () if isinstance(tool, dict)]
    functions = [tool["function"] for tool in tools if isinstance(tool.get("function"), dict)]
    demanded = _required(params)
    if demanded == "*" and len(tools) == 1 and len(functions) == 1:
        demanded = functions[0].get("name")
    chosen = [function for function in functions if function.get("name") == demanded]
    if len(chosen) == 1 and chosen[0].get("strict") is True:
        return dict(chosen[0])
    return None


#: Request fields that describe tools: a forced call through the tiers sends none.
TOOL_FIELDS = ("tools", "tool_choice", "parallel_tool_calls")


async def run_forced(call: Call, upstream: Upstream, function: Mapping[str, Any]) -> ToolsOutcome:
    """A call forced to one strict function, through jsonmode's tiers (``upstream.run``)
    with the function's parameters as the schema: constrained or native where the
    upstream takes a schema, else prompted with repair and re-ask, so it holds on
    upstreams without tool calling too. The function's name and description lead the
    messages; the answer is rendered as that function's call.

    Raises:
        ServeError: as :meth:`Upstream.run` does (422 after the last attempt ...).
    """
    name = str(function.get("name"))
    what = f"Call the function `{name}`"
    if isinstance(function.get("description"), str) and function["description"]:
        what += f" ({function['description']})"
    hint = {
        "role": "system",
        "content": f"{what}: reply with its arguments, one JSON object.",
    }
    params = {key: value for key, value in call.params.items() if key not in TOOL_FIELDS}
    schema = function.get("parameters", {"type": "object", "properties": {}})
    forced = dataclasses.replace(
        call,
        messages=(hint, *call.messages),
        schema=schema,
        schema_name=name,
        kind="tool",
        params=params,
    )
    outcome = await upstream.run(forced)
    if outcome.refusal is not None:
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": outcome.refusal}
        finish = "stop"
    else:
        tool_call = {
            "id": "call_" + uuid.uuid4().hex[:24],
            "type": "function",
            "function": {"name": name, "arguments": outcome.text},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
        finish = "tool_calls"
    prefix = "tool_calls[0].function.arguments"
    repairs = tuple(
        {**repair, "path": prefix + str(repair.get("path", "$")).removeprefix("$")}
        for repair in outcome.repairs
    )
    completion = {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    return ToolsOutcome(
        completion,
        outcome.mode,
        outcome.attempts,
        repairs,
        outcome.usage,
        tuple(outcome.outcomes),
        tier=outcome.tier,
    )


class ToolsRendering(ChunkedReply[ToolsOutcome]):
    """A :class:`ToolsOutcome` as a ``chat.completion`` (the model the client named,
    ``usage`` summed over every attempt, the ``jsonmode`` record), or as its
    ``chat.completion.chunk`` events: the role, the content, each call whole (id, name,
    arguments), the finish reason with the ``jsonmode`` record, the usage chunk when
    ``stream_options.include_usage`` asked, ``[DONE]``."""

    def body(self, done: ToolsOutcome) -> dict[str, Any]:
        finish = done.completion["choices"][0].get("finish_reason") or "tool_calls"
        return self.completion(done.message, finish, done.usage, done.record())

    def events(self, done: ToolsOutcome) -> Sequence[bytes]:
        message = done.message
        choice = done.completion["choices"][0]
        events = []
        if message.get("content"):
            events.append(event(self.chunk({"content": message["content"]})))
        for index, tool_call in enumerate(message.get("tool_calls") or []):
            function = tool_call.get("function") or {}
            delta = {
                "index": index,
                "id": tool_call.get("id"),
                "type": "function",
                "function": {
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                },
            }
            events.append(event(self.chunk({"tool_calls": [delta]})))
        finish = choice.get("finish_reason") or "tool_calls"
        return [*events, *self.closing(finish, done.usage, done.record())]


def has_strict_tools(call: Call) -> bool:
    """Whether the request offers a function tool marked ``"strict": true``."""
    tools = call.params.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, dict)
        and isinstance(tool.get("function"), dict)
        and tool["function"].get("strict") is True
        for tool in tools
    )


def tools_reply(call: Call, upstream: Upstream, keepalive_s: float) -> Deferred[ToolsOutcome]:
    """The ASGI answer to a chat call with strict tools (see the module docstring).

    Raises:
        ServeError: 400 for a strict tool whose parameters cannot be used, or ``n``
            other than 1 (before the upstream is touched).
    """
    strict_tools(call.params)
    if call.params.get("n", 1) not in (1, None):
        raise ServeError(400, "n must be 1 with strict tools", param="n", code="unsupported_value")
    return Deferred(
        run_tools(call, upstream), ToolsRendering(call), stream=call.stream, keepalive_s=keepalive_s
    )
