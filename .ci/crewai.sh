#!/usr/bin/env bash
# The CrewAI adapter's suite (tests/with_crewai), in crewai's own virtual environment:
# crewai pins its own pydantic and json-repair, so it must never constrain the main
# environment. Arguments go to pytest. pytest's exit status passes through unchanged:
# "no tests collected" (5) fails CI. `--build` only builds the environment, `--test` only
# runs the suite in the one built (.ci/run builds while the main suite runs).
set -euo pipefail
cd "$(dirname "$0")/.."

step=all
if [ "${1:-}" = --build ] || [ "${1:-}" = --test ]; then step=${1#--}; shift; fi
venv=.venv-crewai
if [ "$step" != test ]; then
    python -m venv --clear "$venv"  # new every run: today's releases, as a new user gets them
    # jsonmode's core needs no torch; should any dependency ever ask for it, the pin keeps
    # pip from resolving an unpinned torch (which pulls gigabytes of CUDA packages).
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --constraint <(echo "torch==2.13.0") \
        -e ".[crewai]" "pytest>=8" "pytest-timeout>=2.3" "pytest-xdist>=3.6"
fi
[ "$step" = build ] && exit 0

# -n 0: serially (pyproject runs the main suite on every core; this one takes seconds).
"$venv/bin/python" -m pytest -n 0 tests/with_crewai "$@"
