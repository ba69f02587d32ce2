"""CrewAI integration (``pip install "jsonmode[crewai]"``, tested with crewai 1.15).

- :func:`schema_guardrail` — a task guardrail: validates (and in repair mode repairs)
  a task's output against a schema, returning CrewAI's ``(bool, value_or_message)``.
  A failure's message lists every error, so the agent can fix its answer on retry.
- :class:`JsonModeLLM` — a CrewAI ``BaseLLM`` that routes every call through jsonmode.
  When CrewAI passes a ``response_model`` (a task's ``response_model``,
  ``output_pydantic`` or ``output_json``), the call goes through the façade (tiers,
  validate → repair → re-ask, typed errors) and returns the validated model instance;
  other calls (the agent's reasoning turns) return the backend's text.

CrewAI pins its own pydantic and json-repair versions: keep it in its own virtual
environment. Importing crewai writes under the home directory.

This module deliberately has no ``from __future__ import annotations``: CrewAI reads
a guardrail's return annotation at run time and accepts only a real ``tuple[bool, Any]``.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from crewai import Task, TaskOutput
from crewai.agents.agent_builder.base_agent import BaseAgent
from crewai.events.types.llm_events import LLMCallType
from crewai.llms.base_llm import BaseLLM, llm_call_context
from pydantic import BaseModel, PrivateAttr

from jsonmode._json import dumps
from jsonmode.backends.base import Completion, Request
from jsonmode.errors import OutputError, UsageError
from jsonmode.facade import JsonMode, TierChoice
from jsonmode.repair.parse import Mode, check_mode, parse
from jsonmode.result import Usage
from jsonmode.retry import TransportPolicy
from jsonmode.schema.core import Schema
from jsonmode.session.prompts import Message, describe_failure, user_messages

__all__ = ["JsonModeLLM", "schema_guardrail"]

# The schema of a free-text call: the backend sees no schema (prompted, unconstrained).
_ANY_JSON = Schema.of(True)


def schema_guardrail(schema: object, mode: Mode = "strict") -> Callable[[TaskOutput], Any]:
    """A CrewAI task guardrail that accepts only output conforming to ``schema``.

    Args:
        schema: a pydantic model, a Python type, a JSON Schema dict or JSON text.
        mode: ``"strict"`` (the answer must be exactly one conforming JSON document)
            or ``"repair"`` (jsonmode's repairs: fences, prose, syntax, wrong types).

    The guardrail returns ``(True, task_output)`` with ``pydantic`` set to the model
    instance (for a pydantic model) and ``json_dict`` to the JSON object; in repair mode
    a repaired answer also replaces ``raw`` with the repaired JSON (a conforming answer
    is never changed). Otherwise it returns ``(False, message)``: every error worded for
    the agent, then the JSON Schema. Use it as ``Task(guardrail=...)`` or in
    ``Task(guardrails=[...])``; CrewAI re-runs the agent with the message, up to
    ``guardrail_max_retries`` times.
    """
    spec = Schema.of(schema)
    check_mode(mode)

    def guardrail(output: TaskOutput) -> tuple[bool, Any]:
        try:
            parsed = parse(output.raw, spec, mode)
        except OutputError as failure:
            return False, f"{describe_failure(failure)}\nJSON Schema: {spec.prompt_form}"
        update: dict[str, Any] = {}
        if parsed.repairs:
            update["raw"] = dumps(parsed.data)
        if isinstance(parsed.value, BaseModel):
            update["pydantic"] = parsed.value
        if isinstance(parsed.data, dict):
            update["json_dict"] = parsed.data
        return True, output.model_copy(update=update)

    guardrail.__name__ = guardrail.__qualname__ = f"jsonmode_guardrail_{spec.name}"
    return guardrail


_F = TypeVar("_F", bound=Callable[..., Any])


def _retried_by_jsonmode(method: _F) -> _F:
    """Keep CrewAI from wrapping ``method`` in its own rate-limit retry loop.

    jsonmode's transport policy already retries rate limits and other transient
    failures; stacked retry loops multiply the waiting. CrewAI wraps a subclass's
    ``call``/``acall`` when the class is created, unless they carry this marker.
    """
    method._crewai_rate_limit_wrapped = True  # type: ignore[attr-defined]
    return method


class JsonModeLLM(BaseLLM):  # type: ignore[misc]
    """A CrewAI LLM whose every call goes through jsonmode.

    Args:
        backend: anything ``JsonMode`` takes (a litellm model string, a callable
            returning text, a :class:`~jsonmode.Backend`, a LangChain model), or a ready
            :class:`~jsonmode.JsonMode` (then leave the other jsonmode arguments out).
        mode, max_attempts, tier, transport: as for ``JsonMode``.
        model: the name CrewAI shows (default: the backend's name).
        **backend_options: the backend's options (``api_base``, ``temperature`` ...).

    ``call``/``acall`` follow the signature CrewAI uses today (``messages, tools,
    callbacks, available_functions, from_task, from_agent, response_model``). With a
    ``response_model`` they return the validated instance or raise jsonmode's
    ``AttemptsExhaustedError``; without one, the backend's text with the agent's stop
    words applied (no validation: there is no schema). Both emit CrewAI's LLM call
    events, run its LLM hooks and count token usage.

    Tools are used through CrewAI's text protocol (``supports_function_calling()`` is
    False). CrewAI passes no ``response_model`` to an agent that has tools (it converts
    the final answer itself), so give such a task :func:`schema_guardrail` to have the
    answer validated. Transient backend failures are retried by jsonmode's transport
    policy, so CrewAI's own rate-limit retry is not stacked on top of it. Copies of the
    LLM (CrewAI copies agents) share one ``JsonMode``.
    """

    llm_type: str = "jsonmode"
    _jm: JsonMode = PrivateAttr()

    def __init__(
        self,
        backend: object,
        *,
        mode: Mode = "strict",
        max_attempts: int = 3,
        tier: TierChoice = "auto",
        transport: TransportPolicy | None = None,
        model: str | None = None,
        **backend_options: Any,
    ) -> None:
        if isinstance(backend, JsonMode):
            if backend_options:
                raise UsageError("pass backend options to the JsonMode itself")
            jm = backend
        else:
            jm = JsonMode(
                backend, mode, max_attempts, tier=tier, transport=transport, **backend_options
            )
        super().__init__(model=model or jm.backend.name, provider="jsonmode")
        self._jm = jm

    @property
    def jsonmode(self) -> JsonMode:
        """The façade every call goes through."""
        return self._jm

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> "JsonModeLLM":
        # CrewAI copies agents and their LLMs. A JsonMode holds no per-request state
        # and is thread-safe, so copies share it (its backend may hold locks, clients
        # and sockets that cannot or should not be copied).
        memo = {} if memo is None else memo
        memo[id(self._jm)] = self._jm
        return super().__deepcopy__(memo)  # type: ignore[no-any-return]

    def supports_function_calling(self) -> bool:
        return False

    @_retried_by_jsonmode
    def call(
        self,
        messages: str | list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Task | None = None,
        from_agent: BaseAgent | None = None,
        response_model: type[BaseModel] | None = None,
    ) -> Any:
        with self._call_scope(messages, tools, callbacks, from_task, from_agent) as scope:
            if response_model is not None:
                result = self._jm.run(scope.messages, response_model)
                return scope.done(result.value, result.usage)
            jm = self._jm
            completion: Completion = jm.transport.retrying()(jm.backend.complete, scope.request())
            return scope.done_text(completion)

    @_retried_by_jsonmode
    async def acall(
        self,
        messages: str | list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        callbacks: list[Any] | None = None,
        available_functions: dict[str, Any] | None = None,
        from_task: Task | None = None,
        from_agent: BaseAgent | None = None,
        response_model: type[BaseModel] | None = None,
    ) -> Any:
        with self._call_scope(messages, tools, callbacks, from_task, from_agent) as scope:
            if response_model is not None:
                result = await self._jm.arun(scope.messages, response_model)
                return scope.done(result.value, result.usage)
            jm = self._jm
            completion: Completion = await jm.transport.aretrying()(
                jm.backend.acomplete, scope.request()
            )
            return scope.done_text(completion)

    @contextmanager
    def _call_scope(
        self,
        messages: str | list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        callbacks: list[Any] | None,
        from_task: Task | None,
        from_agent: BaseAgent | None,
    ) -> Iterator["_CallScope"]:
        """CrewAI's bookkeeping around one call: call id, events, hooks, usage."""
        with llm_call_context():
            self._emit_call_started_event(
                messages=messages,
                tools=tools,
                callbacks=callbacks,
                from_task=from_task,
                from_agent=from_agent,
            )
            try:
                formatted = self._format_messages(messages)
                self._invoke_before_llm_call_hooks(formatted, from_agent)
                yield _CallScope(self, formatted, from_task, from_agent)
            except Exception as exc:
                self._emit_call_failed_event(
                    error=f"{type(exc).__name__}: {exc}", from_task=from_task, from_agent=from_agent
                )
                raise


class _CallScope:
    """One call's messages, and how its answer is reported back to CrewAI."""

    def __init__(
        self,
        llm: JsonModeLLM,
        messages: list[Any],
        from_task: Task | None,
        from_agent: BaseAgent | None,
    ) -> None:
        self.llm = llm
        self.messages: tuple[Message, ...] = user_messages(messages)
        self.from_task = from_task
        self.from_agent = from_agent

    def request(self) -> Request:
        return Request(self.messages, _ANY_JSON)

    def done_text(self, completion: Completion) -> str:
        text = self.llm._apply_stop_words(completion.text)
        text = self.llm._invoke_after_llm_call_hooks(list(self.messages), text, self.from_agent)
        return self.done(text, completion.usage)  # type: ignore[no-any-return]

    def done(self, answer: Any, usage: Usage | None) -> Any:
        usage_data = None
        if usage is not None:
            usage_data = {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.total_tokens,
            }
            self.llm._track_token_usage_internal(usage_data)
        self.llm._emit_call_completed_event(
            response=answer,
            call_type=LLMCallType.LLM_CALL,
            from_task=self.from_task,
            from_agent=self.from_agent,
            messages=list(self.messages),
            usage=usage_data,
        )
        return answer
