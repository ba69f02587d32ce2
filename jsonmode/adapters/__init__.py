"""Integrations with other frameworks, each an optional extra imported on demand.

- :mod:`jsonmode.adapters.langchain` (``pip install "jsonmode[langchain]"``): an output
  parser for LCEL chains, any LangChain model as a jsonmode backend, and the whole
  validate → repair → re-ask loop as one runnable.
- :mod:`jsonmode.adapters.crewai` (``pip install "jsonmode[crewai]"``): a task
  guardrail and a CrewAI LLM that routes through jsonmode.

``import jsonmode`` imports neither; each adapter goes through the same
:class:`~jsonmode.JsonMode` façade and :func:`~jsonmode.parse` as everything else.
"""
