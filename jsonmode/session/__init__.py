"""The attempt session: one request's tier → attempt → judge → repair → re-ask, sans
I/O, and the drivers that pump it.

- :mod:`~jsonmode.session.records`: what flows in and out (``Reply``, ``Trace``,
  ``Context``, the ``Session`` generator type) and what a session needs of the instance
  that runs it (``Settings``: ``JsonMode`` is one).
- :mod:`~jsonmode.session.attempts`: the session itself (``schema_session``,
  ``text_session``, ``attempts``).
- :mod:`~jsonmode.session.judges` (``Judge``, ``SchemaJudge``) and
  :mod:`~jsonmode.session.grammar_judge` (``GrammarJudge``): how a target judges one
  output.
- :mod:`~jsonmode.session.prompts`: the first prompt and the re-asks.
- :mod:`~jsonmode.session.drivers` (sync, async, inside-out),
  :mod:`~jsonmode.session.streamed` (streamed replies),
  :mod:`~jsonmode.session.lockstep` (batched calls) and
  :mod:`~jsonmode.session.pool` (many sessions on a bounded pool of threads): the pumps.

The public verbs (``facade``, ``streaming``, ``batch``, ``texts``) are its clients;
nothing here imports them.
"""

from jsonmode.session.attempts import (
    Prompt,
    attempts,
    check_reasoning,
    judged,
    reasoning_of,
    schema_session,
    text_session,
)
from jsonmode.session.drivers import acall, adrive, call, drive, refused, steps, tries
from jsonmode.session.grammar_judge import GrammarJudge
from jsonmode.session.judges import Judge, SchemaJudge
from jsonmode.session.lockstep import Entry, Lockstep
from jsonmode.session.records import Context, Reply, Session, Settings, Trace
from jsonmode.session.schema_warnings import SchemaWarnings

__all__ = [
    "Context",
    "Entry",
    "GrammarJudge",
    "Judge",
    "Lockstep",
    "Prompt",
    "Reply",
    "SchemaJudge",
    "SchemaWarnings",
    "Session",
    "Settings",
    "Trace",
    "acall",
    "adrive",
    "attempts",
    "call",
    "check_reasoning",
    "drive",
    "judged",
    "reasoning_of",
    "refused",
    "schema_session",
    "steps",
    "text_session",
    "tries",
]
