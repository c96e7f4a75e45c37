"""A user's own job, written only against ``speedlayer``'s public API: shop orders, totals per customer.

Not registered anywhere: the tests run it as a Job object and as a ``module:attribute`` reference.
The input and its oracle are plain Python (``order_lines``, ``expected``), never the pipeline.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer import APPEND, COMPLETE, DEAD_LETTERS, UPDATE, EventSchema, Field, Job, Output, Params

CURRENCIES = ("EUR", "USD", "GBP")
ORDER = EventSchema(
    name="shop order",
    fields=(Field("order_id", "string"), Field("customer", "string"), Field("amount", "double", min=0, max=100_000),
            Field("currency", "string", choices=CURRENCIES), Field("order_time", "timestamp")),
    time_field="order_time",
)


def shop_pipeline(orders: DataFrame, params: Params) -> Mapping[str, DataFrame]:
    return {
        "orders": orders.select("order_id", "customer", "amount", "currency", "order_time"),
        "totals": orders.groupBy("customer", "currency").agg(F.count(F.lit(1)).alias("orders"),
                                                             F.sum("amount").alias("amount")),
    }


SHOP = Job(
    name="shop",
    summary="shop orders, and totals per customer and currency",
    schema=ORDER,
    pipeline=shop_pipeline,
    outputs={
        "orders": Output("orders", "every valid order", (APPEND,), APPEND, False, ("order_id",)),
        "totals": Output("totals", "orders and amount per customer and currency", (COMPLETE, UPDATE), COMPLETE, True,
                         ("customer", "currency")),
        "dead-letters": DEAD_LETTERS,
    },
    default_outputs=("totals",),
)


def order_lines(count: int = 60) -> list[str]:
    """JSON lines of orders from the last hour, with malformed ones among them."""
    start = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
    lines = []
    for i in range(count):
        order = {"order_id": f"o{i:03d}", "customer": ("ann", "bob", "cyd", "dee")[i % 4],
                 "amount": round(3.25 * (i % 11) + 0.5, 2), "currency": CURRENCIES[i % 3],
                 "order_time": (start + timedelta(seconds=37 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")}
        lines.append(json.dumps(order))
    day = "2026-01-01T00:00:00Z"
    return lines + [
        "this is not json",
        json.dumps({"order_id": "x1", "customer": "ann", "amount": -4.0, "currency": "EUR", "order_time": day}),
        json.dumps({"order_id": "x2", "customer": "bob", "amount": 9.0, "currency": "JPY", "order_time": day}),
        json.dumps({"order_id": "x3", "amount": 9.0, "currency": "EUR", "order_time": day}),
        json.dumps({"order_id": "x4", "customer": "cyd", "amount": "lots", "currency": "USD", "order_time": day}),
        json.dumps({"order_id": "x5", "customer": "dee", "amount": 1.0, "currency": "GBP", "order_time": "yesterday"}),
    ]


def valid_order(line: str) -> dict | None:
    """The order a line holds if it is a valid one, by the schema's rules written in plain Python."""
    try:
        order = json.loads(line)
    except ValueError:
        return None
    if not isinstance(order, dict) or any(not str(order.get(k) or "").strip() for k in ("order_id", "customer")):
        return None
    amount = order.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount <= 100_000:
        return None
    if order.get("currency") not in CURRENCIES:
        return None
    try:
        when = datetime.fromisoformat(str(order.get("order_time")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return order if datetime(2000, 1, 1, tzinfo=timezone.utc) <= when <= datetime.now(timezone.utc) else None


def expected(lines: list[str]) -> tuple[list[dict], dict[tuple[str, str], tuple[int, float]], list[str]]:
    """(valid orders, (customer, currency) -> (orders, amount), malformed lines) of the input."""
    orders = [o for o in map(valid_order, lines) if o is not None]
    totals: dict[tuple[str, str], tuple[int, float]] = {}
    for o in orders:
        count, amount = totals.get((o["customer"], o["currency"]), (0, 0.0))
        totals[(o["customer"], o["currency"])] = (count + 1, amount + o["amount"])
    return orders, totals, [line for line in lines if valid_order(line) is None]
