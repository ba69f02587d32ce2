"""Format regexes against jsonschema's Draft 2020-12 format checker.

Where ``FORMAT_EXACTNESS`` says exact, DFA and checker agree on every sample; where it
says narrower, whatever the DFA accepts the checker accepts. For time, date-time and
uri the only difference allowed is the trailing "\\n" that the checker's Python ``$``
lets through, so they are compared exactly on every other sample.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from jsonmode import regex as rx
from jsonmode.decoding.compile import format_patterns as formats

SUITE = (
    Path(__file__).resolve().parents[2]
    / "shared/data/json-schema-test-suite/tests/draft2020-12/optional/format"
)
CHECKER = Draft202012Validator.FORMAT_CHECKER
NAMES = sorted(formats.FORMAT_PATTERNS)
# Exact but for the checker's trailing-newline quirk.
NEWLINE_ONLY = {"time", "date-time", "uri"}

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def checker_accepts(text: str, name: str) -> bool:
    try:
        return CHECKER.conforms(text, name)
    except Exception:  # a checker that crashes has not accepted the string
        return False


def check(name: str, text: str) -> None:
    """Assert the documented relation between the DFA and the checker on ``text``."""
    dfa = formats.format_dfa(name)
    assert dfa is not None
    ours, theirs = dfa.accepts(text), checker_accepts(text, name)
    exactness = formats.FORMAT_EXACTNESS[name]
    if exactness == "exact" or (name in NEWLINE_ONLY and not text.endswith("\n")):
        assert ours == theirs, (name, text, ours, theirs)
    elif exactness == "narrower":
        assert theirs or not ours, (name, text)
    else:
        assert ours or not theirs, (name, text)


@functools.cache
def suite_strings(name: str) -> list[str]:
    path = SUITE / f"{name}.json"
    out = []
    for group in json.loads(path.read_text(encoding="utf-8")):
        out += [case["data"] for case in group["tests"] if isinstance(case["data"], str)]
    return out


# Strings the DFA must accept: typical valid values (the checker accepts them too).
TYPICAL = {
    "date": ["1963-06-19", "2020-02-29", "2000-02-29", "0400-02-29", "0001-01-01", "9999-12-31"],
    "time": ["08:30:06Z", "23:59:59.999+23:59", "00:00:00-00:00", "12:34:56.5z", "01:02:03+01:00"],
    "date-time": [
        "1963-06-19T08:30:06.283185Z",
        "1990-12-31T15:59:50.123-08:00",
        "1963-06-19t08:30:06.283185z",
        "2024-02-29T00:00:00Z",
    ],
    "duration": [
        "P4DT12H30M5S",
        "PT0S",
        "P0D",
        "P1M",
        "PT1M",
        "PT36H",
        "P1DT12H",
        "P2W",
        "P1Y2M3DT4H5M6S",
        "P1Y2M3D",
        "PT1H2M3S",
        "P1M2D",
        "PT1H30M",
        "P10Y10M10DT10H10M10S",
        "P01D",
        "P1Y2M",
        "PT1M2S",
    ],
    "email": [
        "joe.bloggs@example.com",
        "te~st@example.com",
        "~test@example.com",
        "test~@example.com",
        '"joe bloggs"@example.com',
        '"joe..bloggs"@example.com',
        '"joe@bloggs"@example.com',
        "joe.bloggs@[127.0.0.1]",
        "joe.bloggs@[IPv6:::1]",
        "te.s.t@example.com",
        "a+tag@sub.example.co.uk",
        "x@localhost",
        "o'brien@example.ie",
    ],
    "uuid": ["2EB8AA08-AA98-11EA-B4AA-73B441D16380", "2eb8aa08-AA98-11ea-B4Aa-73B441D16380"],
    "ipv4": ["0.0.0.0", "255.255.255.255", "192.168.0.1", "10.20.30.40", "1.2.3.4"],
    "ipv6": [
        "::",
        "::1",
        "1::",
        "1:2:3:4:5:6:7:8",
        "1::8",
        "1:2:3:4:5:6:7::",
        "::2:3:4:5:6:7:8",
        "::ffff:192.168.0.1",
        "1:2:3:4:5:6:1.2.3.4",
        "1:2:3:4:5::1.2.3.4",
        "fe80::1:2",
        "2001:db8::7",
        "ABCD:ef01::1",
    ],
    "uri": [
        "http://foo.bar/?baz=qux#quux",
        "ldap://[2001:db8::7]/c=GB?objectClass?one",
        "mailto:John.Doe@example.com",
        "urn:oasis:names:specification:docbook:dtd:xml:4.1.2",
        "https://user:pw@example.com:8080/a/b%20c?x=1&y=2#frag",
        "file:///etc/hosts",
        "a:",
        "http://[v1.fe80::a+en1]/",
        "tel:+1-816-555-1212",
    ],
    "hostname": [
        "www.example.com",
        "hostname",
        "h0stn4me",
        "1host",
        "hostnam3",
        "host-name",
        "a--b.com",
        "example.",
        "xn--9n2bp8q.xn--9t4b11yi5a",
        "service.namespace.svc.cluster.local",
        "a.b.c.d.e.f.g.h",
        "WWW.EXAMPLE.COM",
        "a" * 63 + ".com",
        "a" * 63 + "." + "b" * 63,
        "my-service.us-east-1.elb.amazonaws.com",
    ],
}

# Strings the DFA must reject (the checker too, except where the format is narrower).
INVALID = {
    "date": ["2021-02-29", "2100-02-29", "0000-01-01", "2020-13-01", "2020-1-01", "2020-01-01\n"],
    "time": ["24:00:00Z", "23:59:60Z", "12:00:00", "12:00:00+24:00", "1:00:00Z", "12:00:00.Z"],
    "date-time": ["1990-02-31T15:59:59Z", "1990-12-31 15:59:59Z", "0000-01-01T00:00:00Z"],
    "duration": ["P", "PT", "P1YT", "P2D1Y", "P1D2H", "P1", "", "1D", "P1W2D"],
    "email": ["", "2962", "@example.com", "joe.bloggs@", "joe bloggs@example.com", "a@b@c"],
    "uuid": ["2eb8aa08aa9811eab4aa73b441d16380", "2eb8aa08-aa98-11ea-b4aa-73b441d1638"],
    "ipv4": ["01.2.3.4", "1.2.3", "256.0.0.0", "1.2.3.4.", " 1.2.3.4", "1.2.3.04"],
    "ipv6": [":::", "1:::2", "1::2::3", "12345::", "::1.2.3.04", "1:2:3:4:5:6:7:8:9", "fe80::1%1"],
    "uri": ["//foo.bar", "/abc", "abc", "http:// x.com", "1http://x", "http://x.com/%6G"],
    "hostname": ["", ".", "-a.com", "a-.com", "a..b", "a_b.com", "a" * 64 + ".com"],
}


def test_tables_cover_the_same_formats() -> None:
    expected = {
        "date", "time", "date-time", "duration", "email", "uuid", "ipv4", "ipv6", "uri", "hostname",
    }  # fmt: skip
    assert set(formats.FORMAT_PATTERNS) == expected
    assert set(formats.FORMAT_EXACTNESS) == expected
    assert set(formats.FORMAT_EXACTNESS.values()) <= {"exact", "narrower", "wider"}
    assert set(TYPICAL) == expected
    assert formats.format_dfa("no-such-format") is None
    assert formats.format_dfa("date") is formats.format_dfa("date")


def test_docstring_table_matches_exactness() -> None:
    doc = formats.__doc__ or ""
    for name, exactness in formats.FORMAT_EXACTNESS.items():
        assert re.search(rf"^{re.escape(name)}\s+{exactness}\s", doc, re.MULTILINE), name


@pytest.mark.parametrize("name", NAMES)
def test_patterns_are_anchored_python_compatible_and_trimmed(name: str) -> None:
    pattern = formats.FORMAT_PATTERNS[name]
    assert pattern.startswith("^")
    assert pattern.endswith("$")
    re.compile(pattern)  # also a valid Python regex, for tools that want one
    dfa = formats.format_dfa(name)
    assert dfa is not None
    assert rx.minimize(dfa) == dfa


@pytest.mark.parametrize("name", NAMES)
def test_typical_and_invalid_values(name: str) -> None:
    dfa = formats.format_dfa(name)
    assert dfa is not None
    for text in TYPICAL[name]:
        assert checker_accepts(text, name), text
        assert dfa.accepts(text), text
    for text in INVALID[name]:
        assert not dfa.accepts(text), text
        check(name, text)


@pytest.mark.parametrize("name", NAMES)
def test_official_suite_samples(name: str) -> None:
    for text in suite_strings(name):
        check(name, text)


@functools.cache
def python_pattern(name: str) -> re.Pattern[str]:
    return re.compile(formats.FORMAT_PATTERNS[name][:-1] + r"\Z")


_MUTATION_ALPHABET = "0123456789abcdefxyzABCDEFTZtz-:.+/?#@[]%_~ \n\u0660\u212a"


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_generated_values(name: str, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(python_pattern(name)), label="value")
    dfa = formats.format_dfa(name)
    assert dfa is not None
    assert dfa.accepts(text)
    assert checker_accepts(text, name), text  # soundness: never produce an invalid value
    edits = data.draw(
        st.lists(
            st.tuples(
                st.integers(0, max(len(text), 1)),
                st.sampled_from(_MUTATION_ALPHABET),
                st.sampled_from(["replace", "insert", "delete"]),
            ),
            min_size=1,
            max_size=3,
        ),
        label="edits",
    )
    mutated = text
    for at, ch, op in edits:
        at = min(at, len(mutated))
        if op == "replace":
            mutated = mutated[:at] + ch + mutated[at + 1 :]
        elif op == "insert":
            mutated = mutated[:at] + ch + mutated[at:]
        else:
            mutated = mutated[:at] + mutated[at + 1 :]
        check(name, mutated)


def test_dates_exhaustively() -> None:
    years = ["0000", "0001", "0004", "0100", "0400", "1582", "1900", "2000", "2020", "2021"]
    years += ["2024", "2100", "2400", "9996", "9999"]
    for year, month, day in itertools.product(years, range(14), range(33)):
        text = f"{year}-{month:02d}-{day:02d}"
        check("date", text)
        if day in (0, 1, 28, 29, 30, 31, 32):
            check("date-time", f"{text}T12:00:00Z")


def test_times_exhaustively() -> None:
    for hour, minute in itertools.product(range(26), (0, 59, 60)):
        for second, offset in itertools.product(
            (0, 59, 60, 61), ("Z", "z", "+23:59", "-24:00", "")
        ):
            check("time", f"{hour:02d}:{minute:02d}:{second:02d}{offset}")
            check("time", f"{hour:02d}:{minute:02d}:{second:02d}.5{offset}")


def test_ipv4_octets() -> None:
    octets = ["0", "00", "01", "1", "9", "10", "99", "100", "199", "200", "249", "250", "255"]
    octets += ["256", "300", "999", "0255", "", "a", "-1", " 1", "1e1", "\u0661"]
    rng = random.Random(4)
    for _ in range(3000):
        check("ipv4", ".".join(rng.choice(octets) for _ in range(rng.choice([3, 4, 4, 4, 5]))))


def _random_ipv6(rng: random.Random) -> str:
    groups = ["", "", "0", "1", "ab", "FFFF", "fFfF", "12345", "g", "0000", "00000", " 1"]
    v4 = ["1.2.3.4", "255.255.255.255", "01.2.3.4", "256.1.1.1", "1.2.3", "0.0.0.0"]
    parts = [rng.choice(groups) for _ in range(rng.randint(1, 10))]
    if rng.random() < 0.3:
        parts.append(rng.choice(v4))
    text = ":".join(parts)
    if rng.random() < 0.05:
        text += rng.choice(["%eth0", "%", "/64", "\n", " "])
    return text


def test_ipv6_random_structures() -> None:
    rng = random.Random(6)
    for _ in range(20000):
        check("ipv6", _random_ipv6(rng))


def test_uri_random_mutations() -> None:
    rng = random.Random(3986)
    seeds = [s for s in suite_strings("uri") if checker_accepts(s, "uri")] + TYPICAL["uri"]
    alphabet = "abc019:/?#[]@!$&'()*+,;=%-._~ \"<>\\^`{|}\u00e9vV"
    for _ in range(5000):
        text = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(text))
            text = text[:at] + rng.choice(alphabet) + text[at + rng.randint(0, 1) :]
        check("uri", text)


def test_newline_quirk_is_the_only_gap() -> None:
    for name in sorted(NEWLINE_ONLY):
        dfa = formats.format_dfa(name)
        assert dfa is not None
        value = TYPICAL[name][0]
        assert checker_accepts(value + "\n", name)
        assert not dfa.accepts(value + "\n")


def test_json_string_body_of_a_format() -> None:
    body = rx.json_string_body_dfa(formats.format_dfa("date") or rx.any_char_dfa(), complete=True)
    assert body.accepts(b"2020-02-29")
    assert body.accepts(b"2020\\u002d02-29")
    canonical = rx.json_string_body_dfa(formats.format_dfa("date") or rx.any_char_dfa())
    assert canonical.accepts(b"2020-02-29")
    assert not canonical.accepts(b"2020\\u002d02-29")  # (a needless escape)
    assert not body.accepts(b"2021-02-29")
