"""A deterministic corpus of malformed model outputs, each with its schema and true value.

Every document is a realistic JSON value (a person, an invoice with line items, a
nested service config, a list of 1-50 entities, a short classification) serialised
with one to three slips that language models make: markdown fences, prose around
the JSON, trailing commas, single quotes, Python literals, comments, stringified
numbers, unquoted keys. The same seed always gives the same corpus.
"""

from __future__ import annotations

import json
import random
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SCHEMAS", "SLIPS", "Document", "build_corpus"]

SLIPS = (
    "fence",
    "prose",
    "trailing_comma",
    "single_quotes",
    "python_literals",
    "comments",
    "stringified_numbers",
    "unquoted_keys",
)
_SLIP_WEIGHTS = (14, 14, 14, 10, 8, 10, 14, 10)

# -- schemas ------------------------------------------------------------------------

_ADDRESS = {
    "type": "object",
    "properties": {
        "street": {"type": "string"},
        "city": {"type": "string"},
        "postcode": {"type": "string"},
        "country": {"type": "string", "minLength": 2, "maxLength": 2},
    },
    "required": ["street", "city", "postcode", "country"],
    "additionalProperties": False,
}

_PERSON = {
    "title": "Person",
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string", "format": "email"},
        "is_active": {"type": "boolean"},
        "height_m": {"type": "number"},
        "phone": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": _ADDRESS,
    },
    "required": ["name", "age", "email", "is_active", "height_m", "phone", "tags", "address"],
    "additionalProperties": False,
}

_LINE_ITEM = {
    "type": "object",
    "properties": {
        "sku": {"type": "string"},
        "description": {"type": "string"},
        "quantity": {"type": "integer", "minimum": 1},
        "unit_price": {"type": "number", "minimum": 0},
        "discount": {"anyOf": [{"type": "number"}, {"type": "null"}]},
    },
    "required": ["sku", "description", "quantity", "unit_price", "discount"],
    "additionalProperties": False,
}

_INVOICE = {
    "title": "Invoice",
    "type": "object",
    "properties": {
        "invoice_id": {"type": "string"},
        "issued": {"type": "string", "format": "date"},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "vat_id": {"type": ["string", "null"]},
                "address": _ADDRESS,
            },
            "required": ["name", "vat_id", "address"],
            "additionalProperties": False,
        },
        "currency": {"enum": ["EUR", "USD", "GBP"]},
        "items": {"type": "array", "items": _LINE_ITEM, "minItems": 1},
        "total": {"type": "number"},
        "paid": {"type": "boolean"},
        "notes": {"type": ["string", "null"]},
    },
    "required": ["invoice_id", "issued", "customer", "currency", "items", "total", "paid"],
    "additionalProperties": False,
}

_CONFIG = {
    "title": "ServiceConfig",
    "type": "object",
    "properties": {
        "service": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "version": {"type": "string"},
                "replicas": {"type": "integer", "minimum": 1},
                "debug": {"type": "boolean"},
            },
            "required": ["name", "version", "replicas", "debug"],
        },
        "database": {
            "type": "object",
            "properties": {
                "host": {"type": "string"},
                "port": {"type": "integer"},
                "pool": {
                    "type": "object",
                    "properties": {
                        "min_size": {"type": "integer"},
                        "max_size": {"type": "integer"},
                        "timeout_s": {"type": "number"},
                    },
                    "required": ["min_size", "max_size", "timeout_s"],
                },
            },
            "required": ["host", "port", "pool"],
        },
        "features": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "logging": {
            "type": "object",
            "properties": {
                "level": {"enum": ["debug", "info", "warning", "error"]},
                "handlers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "kind": {"enum": ["console", "file", "syslog"]},
                            "path": {"type": ["string", "null"]},
                            "rotate_mb": {"type": ["integer", "null"]},
                        },
                        "required": ["kind", "path"],
                    },
                },
            },
            "required": ["level", "handlers"],
        },
    },
    "required": ["service", "database", "features", "logging"],
}

_PRODUCT = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "price": {"type": "number", "minimum": 0},
        "in_stock": {"type": "boolean"},
        "category": {"enum": ["office", "kitchen", "garden", "electronics", "toys"]},
        "rating": {"type": ["number", "null"]},
    },
    "required": ["id", "name", "price", "in_stock", "category", "rating"],
    "additionalProperties": False,
}

_PRODUCTS = {
    "title": "ProductList",
    "type": "object",
    "properties": {
        "results": {"type": "array", "items": _PRODUCT},
        "count": {"type": "integer"},
    },
    "required": ["results", "count"],
}

_EVENTS = {
    "title": "Events",
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "date": {"type": "string", "format": "date"},
            "attendees": {"type": "integer", "minimum": 0},
            "online": {"type": "boolean"},
            "organizer": {"type": "string"},
        },
        "required": ["title", "date", "attendees", "online", "organizer"],
    },
}

_REVIEW = {
    "title": "ReviewAnalysis",
    "type": "object",
    "properties": {
        "sentiment": {"enum": ["positive", "neutral", "negative"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "summary": {"type": "string"},
        "key_phrases": {"type": "array", "items": {"type": "string"}},
        "stars": {"type": "integer", "minimum": 1, "maximum": 5},
        "needs_reply": {"type": "boolean"},
    },
    "required": ["sentiment", "confidence", "summary", "key_phrases", "stars", "needs_reply"],
}

SCHEMAS: dict[str, dict[str, Any]] = {
    "person": _PERSON,
    "invoice": _INVOICE,
    "config": _CONFIG,
    "products": _PRODUCTS,
    "events": _EVENTS,
    "review": _REVIEW,
}

# -- realistic values ---------------------------------------------------------------

_FIRST = [
    "Ada",
    "Grace",
    "Alan",
    "Zoë",
    "José",
    "Liam",
    "Priya",
    "Chen",
    "Fatima",
    "Sean",
    "Ingrid",
]
_LAST = ["Lovelace", "Hopper", "Turing", "O'Brien", "Álvarez", "Nakamura", "Okafor", "D'Angelo"]
_CITIES = [
    ("London", "GB"),
    ("Berlin", "DE"),
    ("Lyon", "FR"),
    ("Austin", "US"),
    ("Toronto", "CA"),
    ("Zürich", "CH"),
    ("Kraków", "PL"),
]
_STREETS = ["High Street", "Baker St", "Hauptstraße", "Rue de la Paix", "Elm Avenue", "Main Road"]
_TAGS = ["vip", "newsletter", "beta-tester", "churn-risk", "enterprise", "trial", "partner"]
_PRODUCTS_POOL = [
    ("Ergonomic office chair, black", "office"),
    ('27" 4K monitor', "electronics"),
    ("USB-C charging cable (2 m)", "electronics"),
    ("Chef's knife, 20 cm", "kitchen"),
    ("Stainless steel kettle 1.7 L", "kitchen"),
    ("Garden hose, 25 m", "garden"),
    ("Wooden train set", "toys"),
    ("Noise-cancelling headphones", "electronics"),
    ("A4 notebook, dotted", "office"),
    ("Kids' watering can", "garden"),
]
_COMPANIES = ["Acme Ltd", "Globex GmbH", "Initech Inc.", "Müller & Söhne KG", "Umbrella Corp"]
_NOTES = [
    "Payment due within 30 days.",
    "Customer's PO number is 4471-B.",
    "Delivered to the loading dock, not reception.",
    "Thanks for your business!",
    "Includes a 5% loyalty discount on line 2.",
]
_EVENT_TITLES = [
    "Quarterly planning",
    "Intro to Rust workshop",
    "Team offsite",
    "Customer webinar: what's new in v3",
    "Board meeting",
    "Hack day",
]
_SUMMARIES = [
    "The customer loved the fast delivery but found the manual confusing.",
    "Product arrived damaged; the replacement took two weeks.",
    "Works as described. Nothing special, nothing bad.",
    "Great value for money — I'd buy it again.",
    "Support didn't answer my emails for 10 days.",
]
_PHRASES = ["fast delivery", "confusing manual", "great value", "damaged box", "slow support"]


def _money(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 2)


def _date(rng: random.Random) -> str:
    return f"20{rng.randint(22, 25)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _address(rng: random.Random) -> dict[str, Any]:
    city, country = rng.choice(_CITIES)
    return {
        "street": f"{rng.randint(1, 250)} {rng.choice(_STREETS)}",
        "city": city,
        "postcode": f"{rng.randint(1000, 99999)}",
        "country": country,
    }


def _person(rng: random.Random) -> dict[str, Any]:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    folded = unicodedata.normalize("NFKD", f"{first}.{last}".lower())
    slug = "".join(ch for ch in folded if ch.isascii() and ch != "'")
    return {
        "name": f"{first} {last}",
        "age": rng.randint(18, 90),
        "email": f"{slug}@example.com",
        "is_active": rng.random() < 0.7,
        "height_m": round(rng.uniform(1.5, 2.0), 2),
        "phone": f"+44 20 7946 {rng.randint(1000, 9999)}" if rng.random() < 0.6 else None,
        "tags": rng.sample(_TAGS, rng.randint(0, 3)),
        "address": _address(rng),
    }


def _invoice(rng: random.Random) -> dict[str, Any]:
    items = []
    for _ in range(rng.randint(1, 15)):
        description, _category = rng.choice(_PRODUCTS_POOL)
        items.append(
            {
                "sku": f"SKU-{rng.randint(10000, 99999)}",
                "description": description,
                "quantity": rng.randint(1, 12),
                "unit_price": _money(rng, 2, 400),
                "discount": round(rng.choice([0.05, 0.1, 0.15]), 2) if rng.random() < 0.3 else None,
            }
        )
    total = round(sum(i["quantity"] * i["unit_price"] for i in items), 2)
    return {
        "invoice_id": f"INV-{rng.randint(2022, 2025)}-{rng.randint(1, 9999):04d}",
        "issued": _date(rng),
        "customer": {
            "name": rng.choice(_COMPANIES),
            "vat_id": f"GB{rng.randint(100000000, 999999999)}" if rng.random() < 0.5 else None,
            "address": _address(rng),
        },
        "currency": rng.choice(["EUR", "USD", "GBP"]),
        "items": items,
        "total": total,
        "paid": rng.random() < 0.5,
        "notes": rng.choice(_NOTES) if rng.random() < 0.6 else None,
    }


def _config(rng: random.Random) -> dict[str, Any]:
    handlers = [
        {
            "kind": kind,
            "path": f"/var/log/app/{kind}.log" if kind == "file" else None,
            "rotate_mb": rng.choice([10, 50, 100]) if kind == "file" else None,
        }
        for kind in rng.sample(["console", "file", "syslog"], rng.randint(1, 3))
    ]
    features = {
        name: rng.random() < 0.5
        for name in rng.sample(
            ["new_checkout", "dark_mode", "beta_search", "audit_log", "sso", "rate_limit"],
            rng.randint(1, 6),
        )
    }
    return {
        "service": {
            "name": rng.choice(["billing-api", "search", "auth-gateway", "reports-worker"]),
            "version": f"{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
            "replicas": rng.randint(1, 12),
            "debug": rng.random() < 0.2,
        },
        "database": {
            "host": rng.choice(["db.internal", "10.0.3.17", "postgres-primary.prod"]),
            "port": rng.choice([5432, 3306, 6432]),
            "pool": {
                "min_size": rng.randint(1, 4),
                "max_size": rng.randint(8, 64),
                "timeout_s": rng.choice([2.5, 5.0, 10.0, 30.0]),
            },
        },
        "features": features,
        "logging": {
            "level": rng.choice(["debug", "info", "warning", "error"]),
            "handlers": handlers,
        },
    }


def _products(rng: random.Random) -> dict[str, Any]:
    count = rng.choice([1, 2, 3, 5, 8, 10, 15, 20, 30, 40, 50])
    results = []
    for index in range(count):
        name, category = rng.choice(_PRODUCTS_POOL)
        results.append(
            {
                "id": 1000 + index * 7 + rng.randint(0, 6),
                "name": name,
                "price": _money(rng, 1, 900),
                "in_stock": rng.random() < 0.8,
                "category": category,
                "rating": round(rng.uniform(1, 5), 1) if rng.random() < 0.8 else None,
            }
        )
    return {"results": results, "count": count}


def _events(rng: random.Random) -> list[dict[str, Any]]:
    return [
        {
            "title": rng.choice(_EVENT_TITLES),
            "date": _date(rng),
            "attendees": rng.randint(0, 400),
            "online": rng.random() < 0.5,
            "organizer": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
        }
        for _ in range(rng.randint(1, 50))
    ]


def _review(rng: random.Random) -> dict[str, Any]:
    return {
        "sentiment": rng.choice(["positive", "neutral", "negative"]),
        "confidence": round(rng.uniform(0.5, 0.99), 2),
        "summary": rng.choice(_SUMMARIES),
        "key_phrases": rng.sample(_PHRASES, rng.randint(1, 3)),
        "stars": rng.randint(1, 5),
        "needs_reply": rng.random() < 0.4,
    }


_KINDS: dict[str, tuple[int, Callable[[random.Random], Any]]] = {
    "person": (3, _person),
    "invoice": (3, _invoice),
    "config": (2, _config),
    "products": (3, _products),
    "events": (2, _events),
    "review": (2, _review),
}

# -- serialisation with slips ------------------------------------------------------

_COMMENTS = [
    "in EUR",
    "ISO 8601",
    "optional",
    "estimated",
    "TODO: confirm with customer",
    "doesn't include tax",
    "taken from the header",
]
_PROSE_BEFORE = [
    "Here is the extracted data:",
    "Sure! Here's the JSON you asked for:",
    "Based on the document, the result is:",
    "I extracted the following fields.",
    "Certainly. The output conforming to the schema is below.",
]
_PROSE_AFTER = [
    "Let me know if you need anything else.",
    "Note: some values were inferred from context.",
    "I hope this helps!",
    "All amounts are as printed on the original document.",
    "",
]


@dataclass
class _Style:
    indent: int | None
    key_quote: str  # '"', "'" or "" (unquoted)
    quote: str  # string quote: '"', "'" or "py" (Python repr)
    python: bool  # True/False/None
    trailing: float  # probability of a trailing comma per non-empty container
    comment: float  # probability of a comment after a member
    hash_comments: bool  # Python-style '#' comments instead of '//'
    stringify: float  # probability of quoting a number


class _Writer:
    def __init__(self, rng: random.Random, style: _Style) -> None:
        self.rng, self.style = rng, style

    def string(self, text: str) -> str:
        quote = self.style.quote
        if quote == "py":
            return repr(text)
        if quote == "'":
            body = json.dumps(text, ensure_ascii=False)[1:-1].replace('\\"', '"')
            return "'" + body.replace("'", "\\'") + "'"
        return json.dumps(text, ensure_ascii=False)

    def key(self, key: str) -> str:
        if self.style.key_quote == "":
            return key
        if self.style.quote == "py":
            return repr(key)
        return f"'{key}'" if self.style.key_quote == "'" else json.dumps(key)

    def scalar(self, value: Any) -> str:
        if value is None or isinstance(value, bool):
            if self.style.python:
                return repr(value)
            return json.dumps(value)
        if isinstance(value, (int, float)):
            text = json.dumps(value)
            return self.string(text) if self.rng.random() < self.style.stringify else text
        return self.string(value)

    def comment(self) -> str:
        text = self.rng.choice(_COMMENTS)
        if self.style.hash_comments:
            return f"  # {text}"
        return f"  // {text}" if self.style.indent else f" /* {text} */"

    def value(self, value: Any, depth: int) -> str:
        if isinstance(value, dict):
            members = [f"{self.key(k)}: {self.value(v, depth + 1)}" for k, v in value.items()]
            return self.container("{", "}", members, depth)
        if isinstance(value, list):
            return self.container("[", "]", [self.value(v, depth + 1) for v in value], depth)
        return self.scalar(value)

    def container(self, open_: str, close: str, members: list[str], depth: int) -> str:
        if not members:
            return open_ + close
        trailing = self.rng.random() < self.style.trailing
        indent = self.style.indent
        if indent is None:
            parts = []
            for index, member in enumerate(members):
                last = index == len(members) - 1
                sep = "," if not last or trailing else ""
                note = self.comment() if self.rng.random() < self.style.comment else ""
                parts.append(member + sep + note)
            return open_ + " ".join(parts) + close
        pad, inner = " " * indent * depth, " " * indent * (depth + 1)
        lines = []
        for index, member in enumerate(members):
            last = index == len(members) - 1
            sep = "," if not last or trailing else ""
            note = self.comment() if self.rng.random() < self.style.comment else ""
            lines.append(f"{inner}{member}{sep}{note}")
        return open_ + "\n" + "\n".join(lines) + "\n" + pad + close


@dataclass(frozen=True)
class Document:
    """One malformed model output.

    Attributes:
        id: position in the corpus.
        kind: which schema (key of :data:`SCHEMAS`).
        slips: the slips applied, in :data:`SLIPS` order.
        text: the model output as the benchmark feeds it.
        truth: the value the model meant.
    """

    id: int
    kind: str
    slips: tuple[str, ...]
    text: str
    truth: Any

    @property
    def schema(self) -> dict[str, Any]:
        return SCHEMAS[self.kind]


def _render(rng: random.Random, value: Any, slips: set[str]) -> str:
    python = "python_literals" in slips
    indent = rng.choice([None, 2, 2, 4])
    if "comments" in slips and indent is None and rng.random() < 0.5:
        indent = 2  # line comments are the common case
    style = _Style(
        indent=indent,
        key_quote="" if "unquoted_keys" in slips else ("'" if "single_quotes" in slips else '"'),
        quote="py" if python else ("'" if "single_quotes" in slips else '"'),
        python=python,
        trailing=rng.uniform(0.3, 1.0) if "trailing_comma" in slips else 0.0,
        comment=rng.uniform(0.1, 0.4) if "comments" in slips else 0.0,
        hash_comments=python and indent is not None and rng.random() < 0.5,
        stringify=rng.uniform(0.3, 1.0) if "stringified_numbers" in slips else 0.0,
    )
    writer = _Writer(rng, style)
    body = writer.value(value, 0)
    if "comments" in slips and indent is not None and rng.random() < 0.4:
        mark = "#" if style.hash_comments else "//"
        body = f"{mark} {rng.choice(['extracted fields', 'result', 'parsed output'])}\n{body}"
    if "fence" in slips:
        body = f"```{rng.choice(['json', 'json', 'JSON', ''])}\n{body}\n```"
    if "prose" in slips:
        before, after = rng.choice(_PROSE_BEFORE), rng.choice(_PROSE_AFTER)
        body = f"{before}\n\n{body}" + (f"\n\n{after}" if after else "")
    return body


def build_corpus(size: int = 200, seed: int = 20240601) -> list[Document]:
    """``size`` malformed outputs; the same ``seed`` always gives the same corpus."""
    rng = random.Random(seed)
    kinds = list(_KINDS)
    weights = [_KINDS[k][0] for k in kinds]
    corpus = []
    for index in range(size):
        kind = rng.choices(kinds, weights)[0]
        truth = _KINDS[kind][1](rng)
        count = rng.choices([1, 2, 3], [4, 4, 2])[0]
        chosen: set[str] = set()
        while len(chosen) < count:
            chosen.add(rng.choices(SLIPS, _SLIP_WEIGHTS)[0])
        text = _render(rng, truth, chosen)
        slips = tuple(s for s in SLIPS if s in chosen)
        corpus.append(Document(index, kind, slips, text, truth))
    return corpus
