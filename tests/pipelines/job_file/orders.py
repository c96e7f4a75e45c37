"""The shop-orders job file of the job-file tests, its input lines, and its results computed the plain way.

The oracle is written from the job file's documented rules (docs/job-files.md), in plain Python
over the input lines: no Spark, no decode, no pipeline function. An order is valid when its line
is a JSON object whose required fields are present (not null, not blank text), whose amount is a
number in [0, 100000], whose currency is EUR, USD or GBP, whose optional gift, when given, is a
boolean, and whose order_time (ISO-8601 or epoch milliseconds) is at most 2 s (a fifth of the 10 s
watermark) ahead of its file's modification time. A re-sent order (same order_id) counts once: the
first copy in the input. A dead letter's reason names the first field, in schema order, that fails.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta

ORDERS_YAML = """\
name: orders
summary: "shop orders: revenue per currency per minute, big orders, spending per customer"
schema:
  name: shop order
  time_field: order_time
  fields:
    - {name: order_id, type: string}
    - {name: customer_id, type: string}
    - {name: amount, type: double, min: 0, max: 100000}
    - {name: currency, type: string, allowed: [EUR, USD, GBP]}
    - {name: coupon, type: string, required: false}
    - {name: gift, type: boolean, required: false}
    - {name: order_time, type: timestamp}
dedup_key: order_id        # a re-sent order counts once
defaults: {watermark: 10s}
default_outputs: [revenue, big-orders]
outputs:
  revenue:
    summary: revenue and orders per currency per minute
    sql: |
      SELECT window(order_time, '1 minute') AS window, currency,
             sum(amount) AS revenue, count(*) AS orders
      FROM events
      GROUP BY window(order_time, '1 minute'), currency
    modes: [append, update, complete]
    key: [window_start, window_end, currency]
  big-orders:
    sql: |
      SELECT order_id, customer_id, amount, currency, coupon, gift, order_time
      FROM events WHERE amount > 1000
    modes: [append]
    key: [order_id]
  per-customer:
    sql: SELECT customer_id, count(*) AS orders, sum(amount) AS spent FROM events GROUP BY customer_id
    modes: [update, complete]
    key: [customer_id]
"""

T0 = datetime(2026, 11, 22, 10, 0, 0)  # naive UTC, as Spark hands timestamps to Python here
#: the landing files' modification time: every order's ingest time
INGEST = T0 + timedelta(hours=1)
WATERMARK = timedelta(seconds=10)
AHEAD = timedelta(seconds=2)
CURRENCIES = ("EUR", "USD", "GBP")
AMOUNTS = (12.5, 250.0, 1500.0, 99.99, 2400.0, 5.0, 1000.0)
FIELDS = ("order_id", "customer_id", "amount", "currency", "coupon", "gift", "order_time")
REQUIRED = {"order_id", "customer_id", "amount", "currency", "order_time"}


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def good_orders(t0: datetime = T0, n: int = 30) -> list[dict]:
    """Valid orders every 9 s from ``t0``, some with a coupon, some with a gift flag, one time as epoch ms."""
    orders = []
    for i in range(n):
        order = {"order_id": f"o-{i:03d}", "customer_id": f"c{i % 4}", "amount": AMOUNTS[i % len(AMOUNTS)],
                 "currency": CURRENCIES[i % 3], "order_time": iso(t0 + timedelta(seconds=9 * i))}
        if i % 4 == 0:
            order["coupon"] = "SPRING"
        if i % 5 == 0:
            order["gift"] = i % 10 == 0
        if i == 7:
            order["order_time"] = int((t0 + timedelta(seconds=63) - datetime(1970, 1, 1)).total_seconds() * 1000)
        if i == 8:
            order["amount"] = "1500.5"  # a number sent as text is taken as the number
        orders.append(order)
    return orders


def input_files(t0: datetime = T0, ingest: datetime = INGEST) -> list[list[str]]:
    """Two landing files of JSON lines: good orders from ``t0``, a re-sent one, and bad lines of every kind
    (one a day ahead of ``ingest``)."""
    orders = [json.dumps(o) for o in good_orders(t0)]
    bad = [
        '{"order_id": "b-1", "customer_id": "c1", "amount": ',                        # malformed JSON
        "not json at all",
        json.dumps({"order_id": "b-2", "customer_id": "c1", "amount": -5, "currency": "EUR", "order_time": iso(t0)}),
        json.dumps({"order_id": "b-3", "customer_id": "c2", "amount": 200000, "currency": "USD", "order_time": iso(t0)}),
        json.dumps({"order_id": "b-4", "customer_id": "c3", "amount": 10, "currency": "JPY", "order_time": iso(t0)}),
        json.dumps({"order_id": "b-5", "amount": 10, "currency": "EUR", "order_time": iso(t0)}),
        json.dumps({"order_id": "b-6", "customer_id": "  ", "amount": 10, "currency": "EUR", "order_time": iso(t0)}),
        json.dumps({"order_id": "b-7", "customer_id": "c1", "amount": 10, "currency": "EUR", "gift": "maybe",
                    "order_time": iso(t0)}),
        json.dumps({"order_id": "b-8", "customer_id": "c1", "amount": 10, "currency": "GBP",
                    "order_time": iso(ingest + timedelta(days=1))}),                  # a clock far ahead
        json.dumps({"order_id": "b-9", "customer_id": "c1", "amount": "lots", "currency": "GBP", "order_time": iso(t0)}),
    ]
    return [orders[:15] + bad[:5], orders[15:] + [orders[3]] + bad[5:]]  # orders[3] re-sent


# --- the oracle -----------------------------------------------------------------------------------

def _missing(value) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _time(value) -> datetime | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return datetime(1970, 1, 1) + timedelta(milliseconds=value)
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).replace(tzinfo=None)
    except ValueError:
        return None


def _field(name: str, value, ingest: datetime):
    """(typed value, reason) of one field; reason None when it passes."""
    if _missing(value):
        return None, f"missing field '{name}'" if name in REQUIRED else None
    if name == "amount":
        number = _number(value)
        if number is None:
            return None, "field 'amount' is not a valid double"
        return number, None if 0 <= number <= 100000 else "field 'amount' is outside [0, 100000]"
    if name == "currency":
        return value, None if value in CURRENCIES else "field 'currency' is not one of EUR, USD, GBP"
    if name == "gift":
        return value, None if isinstance(value, bool) else "field 'gift' is not a valid boolean"
    if name == "order_time":
        t = _time(value)
        if t is None:
            return None, "field 'order_time' is not a valid timestamp (ISO-8601 or epoch milliseconds)"
        return t, None if t <= ingest + AHEAD else "field 'order_time' is more than 2s ahead of ingest time"
    return value, None


def decode_line(line: str, ingest: datetime) -> tuple[dict | None, str | None]:
    """(order, None) for a valid line taken in at ``ingest``, (None, reason) for a dead letter."""
    try:
        obj = json.loads(line)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return None, "malformed JSON: not a JSON object"
    order = {}
    for name in FIELDS:
        order[name], reason = _field(name, obj.get(name), ingest)
        if reason:
            return None, reason
    return order, None


def oracle(files: list[list[str]], ingest: datetime = INGEST) -> dict:
    """Every output of the job file over these files, read in order and taken in at ``ingest``.

    ``revenue`` holds the windows append mode writes when all lines are read in one micro-batch
    (those the final watermark has passed); ``windows`` every window (update mode's final rows).
    """
    orders, dead, seen = [], [], set()
    for lines in files:
        for line in lines:
            order, reason = decode_line(line, ingest)
            if reason:
                dead.append((line, reason))
            elif order["order_id"] not in seen:
                seen.add(order["order_id"])
                orders.append(order)
    watermark = max(o["order_time"] for o in orders) - WATERMARK
    windows = defaultdict(lambda: [0.0, 0])
    for o in orders:
        start = o["order_time"].replace(second=0, microsecond=0)
        windows[(start, start + timedelta(minutes=1), o["currency"])][0] += o["amount"]
        windows[(start, start + timedelta(minutes=1), o["currency"])][1] += 1
    customers = defaultdict(lambda: [0, 0.0])
    for o in orders:
        customers[o["customer_id"]][0] += 1
        customers[o["customer_id"]][1] += o["amount"]
    return {
        "watermark": watermark,
        # append mode: a window is written once the watermark has passed its end
        "revenue": {k: (round(v[0], 6), v[1]) for k, v in windows.items() if k[1] <= watermark},
        "windows": {k: (round(v[0], 6), v[1]) for k, v in windows.items()},
        "big-orders": {o["order_id"]: tuple(o[f] for f in FIELDS[1:]) for o in orders if o["amount"] > 1000},
        "per-customer": {c: (n, round(s, 6)) for c, (n, s) in customers.items()},
        "dead-letters": sorted(dead),
    }
