"""Text → JSON → coerced value, with a record of every repair.

``parse`` turns one model reply into a conforming value or a typed error (strict: read
and validate; repair: ``extract`` finds the document in prose or fences, ``syntax``
repairs it with json-repair under a content-loss guard, ``coerce`` fixes types toward
the schema; :func:`jsonmode.parse` is its public face). ``partial`` and
``typed_partial`` read the partial values of a stream.
"""

from jsonmode.repair.report import REPAIR_KINDS, Repair, RepairKind

__all__ = ["REPAIR_KINDS", "Repair", "RepairKind"]
