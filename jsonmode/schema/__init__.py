"""Schema input → normalised JSON Schema, validation, and the issues it reports."""

from jsonmode.schema.core import Checked, Schema
from jsonmode.schema.spelling import SchemaWarning
from jsonmode.schema.validation import Issue

__all__ = ["Checked", "Issue", "Schema", "SchemaWarning"]
