"""The command's start-up: litellm's import (seconds) begun early, and said on a terminal.

An API model needs litellm, whose import takes seconds. The command starts it in a
background thread as soon as it has read its arguments, before it reads the schema,
the input and the prompt; the first request waits for what is left of it
(:func:`jsonmode.backends.litellm.import_in_background`), and no timing includes it
(the façade prepares the backend before its clocks start).
"""

from __future__ import annotations

import os
import sys
import threading

__all__ = ["NOTE", "NOTE_AFTER", "import_litellm_early"]

#: Seconds of import after which a terminal is told what the wait is.
NOTE_AFTER = 1.0
NOTE = "jsonmode: loading litellm (once per run, a few seconds) ..."


def import_litellm_early(model: str | None, *, note: bool) -> None:
    """Start importing litellm when ``model`` is an API model (not a local folder).

    With ``note``, on a terminal, :data:`NOTE` goes to stderr when the import is still
    going after :data:`NOTE_AFTER` seconds (never on a pipe: scripts read stderr).
    Returns at once; the note comes from a daemon thread.
    """
    if not model or os.path.isdir(model):
        return
    from jsonmode.backends.litellm import import_in_background

    importer = import_in_background()
    if importer is None or not note or not sys.stderr.isatty():
        return

    def say() -> None:
        importer.join(NOTE_AFTER)
        if importer.is_alive():
            print(NOTE, file=sys.stderr, flush=True)

    threading.Thread(target=say, name="jsonmode-import-note", daemon=True).start()
