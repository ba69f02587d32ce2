"""``python -m jsonmode.cli``: the ``jsonmode`` command (see :mod:`jsonmode.cli`).

:mod:`jsonmode.cli.batch` knows this module by name: a process whose ``__main__`` it is
runs the command line itself, and may end at once (``os._exit``) on Ctrl-C.
"""

from __future__ import annotations

import sys

from jsonmode.cli import main

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
