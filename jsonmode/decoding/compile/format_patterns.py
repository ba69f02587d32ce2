"""JSON Schema ``format`` values as ECMA regexes, measured against ``jsonschema``.

The reference is ``jsonschema.Draft202012Validator.FORMAT_CHECKER`` with the
``format-nongpl`` extra installed (what jsonmode post-validates with). Each regex
in :data:`FORMAT_PATTERNS` is anchored and is either **exact** (accepts precisely
the strings the checker accepts) or **narrower** (everything it accepts the checker
accepts too, so constrained output always passes, but some checker-valid strings
cannot be produced). None is wider.

=========  =========  ===================================================================
format     exactness  notes
=========  =========  ===================================================================
date       exact      ``YYYY-MM-DD``, ASCII digits, year 0001–9999, month 01–12, days per
                      month, **leap years in full** (Feb 29 iff the year is divisible by 4
                      and not by 100, or by 400) — what ``date.fromisoformat`` checks.
time       narrower   RFC 3339 ``full-time`` as the checker reads it: hours 00–23,
                      seconds 00–59 (the checker rejects leap second ``60``), optional
                      ``.fraction``, ``Z``/``z`` or ``±hh:mm`` (hh 00–23). Exact except
                      one quirk left out on purpose: the checker's Python ``$`` also
                      accepts a single trailing ``"\\n"``.
date-time  narrower   ``date`` + ``T``/``t`` + ``time``: exact except the trailing ``"\\n"``.
duration   narrower   RFC 3339 Appendix A ABNF (``P1Y2M3DT4H5M6S``, ``P1W``, …: integer
                      components, contiguous units, no sign). ``isoduration`` also
                      accepts signs, fractions, exponents, ``,`` decimals, skipped units
                      (``P1Y2D``), ``P1WT1H``, ``P0Y1W`` and junk before ``T``.
email      narrower   RFC 5321 mailbox: dot-atom or quoted local part, ``@``, a host
                      name, ``[IPv4]`` or ``[IPv6:…]`` literal. The checker only asks
                      for an ``@`` somewhere, which would let anything through.
uuid       narrower   ``8-4-4-4-12`` hex digits (either case). ``uuid.UUID`` also accepts
                      ``urn:uuid:`` / braces / extra hyphens / ``_`` / non-ASCII digits
                      as long as hyphens sit at offsets 8, 13, 18, 23.
ipv4       exact      four decimal octets 0–255, no leading zeros (``ipaddress``).
ipv6       exact      ``ipaddress.IPv6Address`` without a zone id: 1–4 hex digits per
                      group, one ``::`` standing for at least one group, an optional
                      trailing dotted IPv4 (counting as two groups).
uri        narrower   rfc3986-validator's URI regex transcribed to ECMA; exact except the
                      trailing ``"\\n"`` that its ``$`` lets through.
hostname   narrower   ASCII letter-digit-hyphen labels of 1–63 characters, not starting
                      or ending with ``-``, optional trailing dot. ``fqdn`` also limits
                      the total to 253 characters — a product automaton of ~14 000
                      states — so instead label *i* is capped at 63, 63, 63, 26, 16, 8,
                      4, 2 characters (at most 8 labels, total ≤ 252). ``fqdn`` also
                      accepts non-ASCII digits, a few non-ASCII letters that case-fold to
                      ASCII (e.g. KELVIN SIGN) and a trailing ``"\\n"``.
=========  =========  ===================================================================

:func:`format_dfa` gives each format's minimal DFA on first use and caches it
(thread-safe). It reads it from :mod:`jsonmode.decoding.compile.format_tables`, a table
generated from :data:`FORMAT_PATTERNS` by this module (``python -m
jsonmode.decoding.compile.format_patterns >
jsonmode/decoding/compile/format_tables.py``): building the larger ones from their regex
costs ~5–15 ms each in a fresh process (email's ~960 subset states), reading one ~0.1–1
ms. Each table entry carries a digest of its regex; an entry whose digest does not match
the regex of today (a regex edited, the table not regenerated) is ignored and the DFA
built from the regex, so the table can only ever stand for what the regex says — and
``tests/test_coldstart_formats.py`` rebuilds every entry from its regex and checks that
the two are equal. The table is a module constant looked up by the names of
:data:`FORMAT_PATTERNS` only: nothing a schema says makes it read anything else.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import sys
import zlib
from typing import Literal

from jsonmode.regex import CharDFA, compile_pattern
from jsonmode.regex.char_dfa import known_minimal

__all__ = ["FORMAT_EXACTNESS", "FORMAT_PATTERNS", "format_dfa"]

# -- building blocks ---------------------------------------------------------------

_D2 = "[0-9]{2}"
_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
_LEAP = "(?:0[48]|[2468][048]|[13579][26])"  # two-digit multiples of 4, except 00
_LEAP_DAY = f"(?:[0-9]{{2}}{_LEAP}|{_LEAP}00)-02-29"
_DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_DAY})"
_HOUR = "(?:[01][0-9]|2[0-3])"
_TIME = f"{_HOUR}:[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:[Zz]|[+-]{_HOUR}:[0-5][0-9])"

_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"

_H16 = "[0-9A-Fa-f]{1,4}"


def _ipv6() -> str:
    """``ipaddress.IPv6Address`` as a regex: every split around one ``::``."""
    alts = [f"(?:{_H16}:){{7}}{_H16}", f"(?:{_H16}:){{6}}{_IPV4}"]
    for before in range(8):  # groups written before "::"
        left = "" if before == 0 else f"(?:{_H16}:){{{before - 1}}}{_H16}"
        room = 7 - before  # groups that may follow, "::" standing for at least one
        tails = []
        if room > 0:
            tails.append(f"{_H16}(?::{_H16}){{0,{room - 1}}}")
        if room >= 2:
            tails.append(f"(?:{_H16}:){{0,{room - 2}}}{_IPV4}")
        tail = f"(?:{'|'.join(tails)})?" if tails else ""
        alts.append(f"{left}::{tail}")
    return "(?:" + "|".join(alts) + ")"


_IPV6 = _ipv6()


def _label(cap: int) -> str:
    """A hostname label of 1..cap letters, digits and inner hyphens."""
    if cap == 1:
        return "[A-Za-z0-9]"
    inner = "" if cap == 2 else f"[A-Za-z0-9-]{{0,{cap - 2}}}"
    return f"[A-Za-z0-9](?:{inner}[A-Za-z0-9])?"


_HOST_CAPS = (63, 63, 63, 26, 16, 8, 4, 2)


def _hostname() -> str:
    body = ""
    for cap in reversed(_HOST_CAPS[1:]):
        body = f"(?:\\.{_label(cap)}{body})?"
    return f"{_label(_HOST_CAPS[0])}{body}\\.?"


_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_LOCAL = (
    f'(?:{_ATEXT}+(?:\\.{_ATEXT}+)*|"(?:[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\[\\x20-\\x7E])*")'
)
_DOMAIN = f"(?:{_label(63)}(?:\\.{_label(63)})*|\\[{_IPV4}\\]|\\[IPv6:{_IPV6}\\])"

_NUM = "[0-9]+"
_DUR_TIME = f"T(?:{_NUM}H(?:{_NUM}M(?:{_NUM}S)?)?|{_NUM}M(?:{_NUM}S)?|{_NUM}S)"
_DUR_DATE = f"(?:{_NUM}Y(?:{_NUM}M(?:{_NUM}D)?)?|{_NUM}M(?:{_NUM}D)?|{_NUM}D)"
_DURATION = f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|{_NUM}W)"

# rfc3986-validator 0.1.1 (what jsonschema uses for "uri"), transcribed: Python's
# "{,n}" is "{0,n}" in ECMA, and the verbose-mode spacing is gone.
_R_HEX = "[0-9A-Fa-f]"
_R_H16 = f"{_R_HEX}{{1,4}}"
_R_OCTET = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
_R_IPV4 = f"(?:{_R_OCTET}\\.){{3}}{_R_OCTET}"
_R_LS32 = f"(?:{_R_H16}:{_R_H16}|{_R_IPV4})"
_R_IPV6 = (
    "(?:"
    f"(?:{_R_H16}:){{6}}{_R_LS32}"
    f"|::(?:{_R_H16}:){{5}}{_R_LS32}"
    f"|(?:{_R_H16})?::(?:{_R_H16}:){{4}}{_R_LS32}"
    f"|(?:(?:{_R_H16}:)?{_R_H16})?::(?:{_R_H16}:){{3}}{_R_LS32}"
    f"|(?:(?:{_R_H16}:){{0,2}}{_R_H16})?::(?:{_R_H16}:){{2}}{_R_LS32}"
    f"|(?:(?:{_R_H16}:){{0,3}}{_R_H16})?::(?:{_R_H16}:){_R_LS32}"
    f"|(?:(?:{_R_H16}:){{0,4}}{_R_H16})?::{_R_LS32}"
    f"|(?:(?:{_R_H16}:){{0,5}}{_R_H16})?::{_R_H16}"
    f"|(?:(?:{_R_H16}:){{0,6}}{_R_H16})?::"
    ")"
)
_R_PCT = f"%{_R_HEX}{{2}}"
_R_UNRESERVED_SUB = "a-zA-Z0-9_.~\\-!$&'()*+,;="
_R_AUTHORITY = (
    f"(?:(?:[{_R_UNRESERVED_SUB}:]|{_R_PCT})*@)?"
    f"(?:\\[(?:{_R_IPV6}|v{_R_HEX}+\\.[{_R_UNRESERVED_SUB}:]+)\\]"
    f"|{_R_IPV4}"
    f"|(?:[{_R_UNRESERVED_SUB}]|{_R_PCT})*)"
    "(?::[0-9]*)?"
)
_R_PCHAR = f"(?:[{_R_UNRESERVED_SUB}:@]|{_R_PCT})"
_R_QUERY = f"(?:[{_R_UNRESERVED_SUB}:@/?]|{_R_PCT})*"
_URI = (
    "[a-zA-Z][a-zA-Z0-9+.-]*:"
    f"(?://{_R_AUTHORITY}(?:/{_R_PCHAR}*)*"
    f"|/(?:{_R_PCHAR}+(?:/{_R_PCHAR}*)*)?"
    f"|{_R_PCHAR}+(?:/{_R_PCHAR}*)*"
    "|)"
    f"(?:\\?{_R_QUERY})?"
    f"(?:#{_R_QUERY})?"
)

_HEX8 = "[0-9A-Fa-f]"

#: Anchored ECMA regexes, one per supported ``format``.
FORMAT_PATTERNS: dict[str, str] = {
    "date": f"^{_DATE}$",
    "time": f"^{_TIME}$",
    "date-time": f"^{_DATE}[Tt]{_TIME}$",
    "duration": f"^{_DURATION}$",
    "email": f"^{_LOCAL}@{_DOMAIN}$",
    "uuid": f"^{_HEX8}{{8}}-{_HEX8}{{4}}-{_HEX8}{{4}}-{_HEX8}{{4}}-{_HEX8}{{12}}$",
    "ipv4": f"^{_IPV4}$",
    "ipv6": f"^{_IPV6}$",
    "uri": f"^{_URI}$",
    "hostname": f"^{_hostname()}$",
}

#: How each pattern relates to the ``jsonschema`` checker (see the module docstring).
FORMAT_EXACTNESS: dict[str, Literal["exact", "narrower", "wider"]] = {
    "date": "exact",
    "time": "narrower",
    "date-time": "narrower",
    "duration": "narrower",
    "email": "narrower",
    "uuid": "narrower",
    "ipv4": "exact",
    "ipv6": "exact",
    "uri": "narrower",
    "hostname": "narrower",
}

# The largest format automaton (uri) needs a few thousand subset states.
_FORMAT_MAX_STATES = 20_000


def format_dfa(name: str) -> CharDFA | None:
    """The minimal DFA of ``FORMAT_PATTERNS[name]`` (read from the table or built once,
    then cached), or None for an unknown format."""
    return _compiled(name) if name in FORMAT_PATTERNS else None


def build_format_dfa(name: str) -> CharDFA:
    """The DFA of ``FORMAT_PATTERNS[name]`` built from the regex (what the table holds).

    Raises:
        KeyError: an unknown format.
    """
    return compile_pattern(FORMAT_PATTERNS[name], max_states=_FORMAT_MAX_STATES)


# Bump when the encoding changes: entries of another version are ignored.
_TABLE_VERSION = 1


def _digest(name: str) -> str:
    """What a table entry must carry to stand for today's regex of ``name``."""
    text = f"{_TABLE_VERSION}:{FORMAT_PATTERNS[name]}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _encode(dfa: CharDFA) -> str:
    """A table entry's data: zlib-compressed JSON ``[start, accepting, rows]`` (accepting
    as a string of 0/1, each row its edges' ``lo, hi, dst`` flattened), in base64."""
    acc = "".join("1" if a else "0" for a in dfa.accepting)
    rows = [[x for edge in row for x in edge] for row in dfa.edges]
    text = json.dumps([dfa.start, acc, rows], separators=(",", ":"))
    return base64.b64encode(zlib.compress(text.encode("ascii"), 9)).decode("ascii")


def _decode(data: str) -> CharDFA:
    start, acc, rows = json.loads(zlib.decompress(base64.b64decode(data)))
    edges = tuple(tuple(zip(row[0::3], row[1::3], row[2::3], strict=True)) for row in rows)
    # The table holds what build_format_dfa returned: trimmed, minimal and canonical.
    return known_minimal(CharDFA(start, tuple(c == "1" for c in acc), edges))


def _from_table(name: str) -> CharDFA | None:
    """The table's DFA of ``name``, or None when it has none for today's regex."""
    from jsonmode.decoding.compile.format_tables import TABLE

    entry = TABLE.get(name)
    if entry is None or entry[0] != _digest(name):
        return None
    return _decode(entry[1])


@functools.cache
def _compiled(name: str) -> CharDFA:
    dfa = _from_table(name)
    return dfa if dfa is not None else build_format_dfa(name)


def table_source() -> str:
    """The text of :mod:`jsonmode.decoding.compile.format_tables`, every DFA built from its regex
    (~0.1 s)."""
    lines = [
        '"""Generated by ``python -m jsonmode.decoding.compile.format_patterns``: do not edit.',
        "",
        "The minimal DFA of every regex of ``formats.FORMAT_PATTERNS``: name -> (digest of",
        "the regex, encoded DFA). See :mod:`jsonmode.decoding.compile.format_patterns`",
        "for how it is read and checked; ``tests/test_coldstart_formats.py`` rebuilds every entry.",
        '"""',
        "",
        "TABLE: dict[str, tuple[str, str]] = {",
    ]
    for name in FORMAT_PATTERNS:
        data = _encode(build_format_dfa(name))
        lines.append(f"    {json.dumps(name)}: (")
        lines.append(f'        "{_digest(name)}",')
        chunks = [data[i : i + 84] for i in range(0, len(data), 84)]
        lines += [f'        "{chunk}"' for chunk in chunks[:-1]]
        lines.append(f'        "{chunks[-1]}",')
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table_source())
