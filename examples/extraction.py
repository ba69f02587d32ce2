"""Extraction into a pydantic model: an order confirmation e-mail → ``Order``.

Run: python examples/extraction.py

The scripted model answers the way models often do: prose, a markdown fence,
single quotes, a trailing comma and prices as strings. Repair mode turns that into
a valid ``Order`` and records every repair; strict mode would re-ask instead.
"""

from __future__ import annotations

from datetime import date

from _offline import backend, show_attempts
from pydantic import BaseModel, Field

import jsonmode


class LineItem(BaseModel):
    product: str
    quantity: int = Field(ge=1)
    unit_price: float = Field(ge=0, description="in the order's currency")


class Order(BaseModel):
    order_id: str = Field(pattern=r"^[A-Z]{2}-\d{5}$")
    customer: str
    delivery_date: date
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    items: list[LineItem] = Field(min_length=1)


EMAIL = """\
Hi Grace, thanks for your order CH-20931! We will deliver on 14 March 2025:
2 x Tea tin (Darjeeling) at CHF 12.50 each, and 1 x Porcelain teapot at CHF 49.
"""

SLOPPY_REPLY = """\
Sure! Here is the order:
```json
{'order_id': 'CH-20931', 'customer': 'Grace', 'delivery_date': '2025-03-14',
 'currency': 'CHF',
 'items': [{'product': 'Tea tin (Darjeeling)', 'quantity': '2', 'unit_price': '12.50'},
           {'product': 'Porcelain teapot', 'quantity': 1, 'unit_price': 49},],}
```"""


def main() -> None:
    model = backend([SLOPPY_REPLY], "Extract an order from an e-mail.")
    jm = jsonmode.JsonMode(model, mode="repair")

    result = jm.run(f"Extract the order from this e-mail:\n{EMAIL}", Order)

    order: Order = result.value
    print(f"order {order.order_id} for {order.customer}, delivery {order.delivery_date}")
    for item in order.items:
        print(f"  {item.quantity} x {item.product} at {item.unit_price:.2f} {order.currency}")
    total = sum(item.quantity * item.unit_price for item in order.items)
    print(f"  total {total:.2f} {order.currency}")
    print("how it went:")
    show_attempts(result.attempts)
    for repair in result.repairs:
        print(f"    repaired {repair}")


if __name__ == "__main__":
    main()
