"""Text → JSON → coerced value, with a record of every repair.

``extract`` finds the document in prose or fences, ``syntax`` repairs it with
json-repair under a content-loss guard, ``coerce`` fixes types toward the schema.
:func:`jsonmode.parse` runs them in order.
"""

from jsonmode.repair.report import REPAIR_KINDS, Repair, RepairKind

__all__ = ["REPAIR_KINDS", "Repair", "RepairKind"]
