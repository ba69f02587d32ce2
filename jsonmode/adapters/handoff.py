"""Compiled automata handed from one process to another through a private directory.

vLLM admits a request in its API server process and decodes it in its engine
process. The vLLM adapter compiles a schema once, at admission, and stores the
compiled automata (:class:`~jsonmode.decoding.automata.network.Network` and the depth
settings its matchers need) here; the engine process only loads them, so its step
never compiles. Importable without vLLM.

Contract:

- **Where.** ``JSONMODE_VLLM_STORE`` when set, else ``jsonmode-vllm-<uid>`` in the
  system's temporary directory. The directory is created with mode 0700 and used
  only while it is a real directory (not a link) owned by this process's user that
  no one else may write, read or list (mode ``& 0o077 == 0``); anything else is
  refused with a :class:`~jsonmode.errors.UsageError` naming the fix. Both processes
  must see the same directory (same machine, or a shared private directory).
- **What.** One file per entry, named by a SHA-256 of the schema's text, the
  compile options the automata depend on, and a fingerprint of jsonmode's decoder
  code (version, and the size and modification time of each of its source files):
  a store left by another jsonmode is never read as this one's. The file is a
  pickle written by this module (temporary file in the directory, then an atomic
  rename) and read back only from that private directory, by its computed name,
  after checking it is a regular file owned by this user (no link followed) and
  that it names the key it was asked for: no one but the server's user can have
  written it. Nothing a client sends is ever unpickled.
- **Bounds.** At most :data:`MAX_ENTRIES` entries and :data:`MAX_BYTES` in all, the
  least recently stored or touched dropped first; an entry over
  :data:`MAX_ENTRY_BYTES` is not stored (:meth:`Handoff.put` says so).
- **Cost.** ``put``: one pickle and one write (a 1.2 KB schema of 16 nested
  ``anyOf``: ~50 KB, a millisecond), plus a directory listing when storing a new
  entry. ``get``: one read and one unpickle (~5 ms for that entry here).

Thread- and process-safe: writes are atomic renames, and a file dropped by another
process between listing and reading is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import pickle
import stat
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from jsonmode.errors import UsageError

if TYPE_CHECKING:
    from jsonmode.decoding.automata.network import Network

__all__ = [
    "MAX_BYTES",
    "MAX_ENTRIES",
    "MAX_ENTRY_BYTES",
    "STORE_ENV",
    "Automata",
    "Handoff",
    "entry_key",
]

STORE_ENV = "JSONMODE_VLLM_STORE"
MAX_ENTRIES = 512
MAX_BYTES = 512 << 20
MAX_ENTRY_BYTES = 64 << 20
_SUFFIX = ".automata"
_MAGIC = "jsonmode-automata-1"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Automata:
    """What a matcher needs of a compiled constraint (no vocabulary: the engine
    process brings its own). Immutable; the network is thread-safe."""

    network: Network
    max_depth: int
    levels: bool


@cache
def _code_fingerprint() -> str:
    """jsonmode's version and the size and mtime of its decoder's sources (computed
    once per process: a few dozen ``stat`` calls)."""
    import jsonmode
    import jsonmode.decoding

    digest = hashlib.sha256(jsonmode.__version__.encode())
    root = Path(jsonmode.decoding.__file__).parent
    for path in sorted(root.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(root)}:{info.st_size}:{info.st_mtime_ns};".encode())
    return digest.hexdigest()


def entry_key(text: str, options: str = "") -> str:
    """The store's name for the automata of the schema ``text`` compiled with
    ``options`` (a canonical text of the options the automata depend on), by this
    jsonmode. Cost: one SHA-256 of the text."""
    digest = hashlib.sha256(_code_fingerprint().encode())
    for part in (options, text):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def default_directory() -> Path:
    """``$JSONMODE_VLLM_STORE``, else ``<tmp>/jsonmode-vllm-<uid>``."""
    chosen = os.environ.get(STORE_ENV)
    if chosen:
        return Path(chosen)
    return Path(tempfile.gettempdir()) / f"jsonmode-vllm-{os.geteuid()}"


class Handoff:
    """A private store of compiled automata in ``directory`` (default:
    :func:`default_directory`). See the module for the contract.

    Raises:
        UsageError: the directory cannot be made, or is not private to this user
            (a link, another owner, or readable or writable by others).
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_directory()
        _private_directory(self.directory)

    def _path(self, key: str) -> Path:
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise UsageError(f"not a store key: {key[:80]!r}", hint="make keys with entry_key()")
        return self.directory / (key + _SUFFIX)

    def put(self, key: str, automata: Automata) -> bool:
        """Store ``automata`` under ``key`` (replacing any entry). False, logged,
        when the entry is over :data:`MAX_ENTRY_BYTES` or cannot be written (a full
        disk): the caller decides whether to refuse."""
        path = self._path(key)
        data = pickle.dumps(
            (_MAGIC, key, automata.network, automata.max_depth, automata.levels),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
        if len(data) > MAX_ENTRY_BYTES:
            log.error("jsonmode: compiled automata of %d bytes not stored (cap %d)",
                      len(data), MAX_ENTRY_BYTES)  # fmt: skip
            return False
        try:
            handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(data)
                os.replace(temporary, path)
            except BaseException:
                _unlink(Path(temporary))
                raise
        except OSError as exc:
            log.error("jsonmode: cannot store compiled automata in %s: %s", self.directory, exc)
            return False
        self._trim()
        return True

    def touch(self, key: str) -> bool:
        """Mark the entry as just used (it is dropped last); False when absent."""
        try:
            os.utime(self._path(key), follow_symlinks=False)
        except OSError:
            return False
        return True

    def get(self, key: str) -> Automata | None:
        """The automata stored under ``key``; None when there are none (never
        stored, dropped, or a file that fails the checks: logged)."""
        path = self._path(key)
        try:
            handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        with os.fdopen(handle, "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                log.error("jsonmode: %s is not a file of this user; ignored", path)
                return None
            if info.st_size > MAX_ENTRY_BYTES:
                log.error("jsonmode: %s is over %d bytes; ignored", path, MAX_ENTRY_BYTES)
                return None
            data = stream.read(MAX_ENTRY_BYTES + 1)
        try:
            magic, named, network, max_depth, levels = pickle.load(io.BytesIO(data))
        except Exception as exc:  # (a file of this user's, written by this module)
            log.error("jsonmode: %s cannot be read: %r; ignored", path, exc)
            return None
        if magic != _MAGIC or named != key:
            log.error("jsonmode: %s holds another entry; ignored", path)
            return None
        return Automata(network, int(max_depth), bool(levels))

    def _trim(self) -> None:
        """Drop the oldest entries past :data:`MAX_ENTRIES` or :data:`MAX_BYTES`."""
        entries: list[tuple[int, int, Path]] = []
        try:
            with os.scandir(self.directory) as listing:
                for entry in listing:
                    if entry.name.endswith(_SUFFIX) and entry.is_file(follow_symlinks=False):
                        info = entry.stat(follow_symlinks=False)
                        entries.append((info.st_mtime_ns, info.st_size, Path(entry.path)))
        except OSError:
            return
        total = sum(size for _, size, _ in entries)
        entries.sort()
        for _, size, path in entries[: max(0, len(entries) - MAX_ENTRIES)]:
            _unlink(path)
            total -= size
        for _, size, path in entries[max(0, len(entries) - MAX_ENTRIES) :]:
            if total <= MAX_BYTES:
                break
            _unlink(path)
            total -= size


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):  # (another process dropped it first)
        path.unlink()


def _private_directory(directory: Path) -> None:
    """Make ``directory`` (mode 0700) if absent; check that it is private to us."""
    try:
        directory.mkdir(mode=0o700, parents=False, exist_ok=True)
        info = directory.lstat()
    except OSError as exc:
        raise UsageError(
            f"jsonmode cannot use {str(directory)!r} to hand compiled schemas to the "
            f"engine: {exc.strerror or exc}",
            hint=f"set {STORE_ENV} to a directory this user can create or write",
        ) from None
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "it is not a directory (or is a link)"
    elif info.st_uid != os.geteuid():
        problem = f"it belongs to user {info.st_uid}, not {os.geteuid()}"
    elif info.st_mode & 0o077:
        problem = f"others may use it (mode {stat.S_IMODE(info.st_mode):o})"
    if problem is not None:
        raise UsageError(
            f"jsonmode will not hand compiled schemas to the engine through "
            f"{str(directory)!r}: {problem}",
            hint=f"set {STORE_ENV} to a directory of mode 0700 owned by this user",
        )
