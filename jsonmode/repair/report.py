"""The record of one repair: nothing jsonmode changes in a model's output goes unrecorded.

The record itself lives on the ground floor (:mod:`jsonmode.records`); this module
keeps the names where the repair code and users have always found them."""

from __future__ import annotations

from jsonmode.records import REPAIR_KINDS, Repair, RepairKind

__all__ = ["REPAIR_KINDS", "Repair", "RepairKind"]
