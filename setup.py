"""Builds jsonmode's compiled core, ``jsonmode._native`` (the C files in ``csrc/``: the
CPython API and the machine's C compiler, nothing else from PyPI), beside the
pure-Python package.

The build is optional: where it fails (no C compiler), the install goes on and
jsonmode runs its pure-Python engine, saying so (``jsonmode doctor``). Setting
``JSONMODE_NO_EXTENSIONS=1`` at install skips the build; at run time it selects the
pure-Python engine even where the extension is built (see ``jsonmode/native.py``).
Everything else about the package is in pyproject.toml.
"""

import os
from pathlib import Path

from setuptools import Extension, setup


def _extensions() -> list[Extension]:
    if os.environ.get("JSONMODE_NO_EXTENSIONS") == "1":
        return []
    flags = os.environ.get("JSONMODE_NATIVE_CFLAGS", "-O2").split()
    return [
        Extension(
            "jsonmode._native",
            sources=sorted(str(path) for path in Path("csrc").glob("*.c")),
            depends=["csrc/native.h", "csrc/regex.h"],
            extra_compile_args=[*flags, "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]


setup(ext_modules=_extensions())
