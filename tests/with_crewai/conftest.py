"""The CrewAI suite: runs only where crewai is installed (its own environment, see
.ci/crewai.sh), with crewai kept offline and away from the real home directory."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import warnings

import pytest

# crewai writes credentials and state under the home directory when imported, and
# traces or reports telemetry unless told not to: both settings must precede the import.
_HOME = tempfile.mkdtemp(prefix="jsonmode-crewai-home-")
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
os.environ["HOME"] = _HOME
os.environ["CREWAI_TESTING"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["OTEL_SDK_DISABLED"] = "true"

with warnings.catch_warnings():
    # crewai's package __init__ forbids setting attributes, which the import system
    # does for each child module: an ImportWarning about crewai's own internals. Matched
    # by category for this import only, never by wording (a new release rewords it).
    warnings.simplefilter("ignore", ImportWarning)
    import crewai  # noqa: F401


# Warnings crewai raises about its own internals while running a crew (warnings are
# errors in this project's tests): an Agent's post-init reads crewai's own deprecated
# fields. Only deprecations attributed to crewai's modules are ignored.
_CREWAI_INTERNAL_WARNINGS = ("ignore::DeprecationWarning:crewai\\..*",)


def pytest_configure(config: pytest.Config) -> None:
    for line in _CREWAI_INTERNAL_WARNINGS:
        config.addinivalue_line("filterwarnings", line)
