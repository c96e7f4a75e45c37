"""Shop orders for the example package's job and its job-file twin (examples/acme-speedlayer), and their
results computed the plain way.

The oracle is written from the documented rules (docs/extending.md, docs/job-files.md), in plain
Python over the input lines: no Spark, no decode, no pipeline function. An order is valid by the
rules of the shop job's schema, the same fields (``tests.runtime.shop.valid_order``). A re-sent order
(same ``order_id``) counts once: the first copy. Every output uses the jobs' defaults: 1-minute
windows, a 10-minute watermark, big orders from 100.

Lateness: the input is read ``PER_BATCH`` entries per micro-batch. An order is late when its time is
at or before the newest order time of the batches two or more before its own, minus the watermark.
The input is built so that whether Spark's watermark lags one batch or two changes nothing: the
on-time orders come in time order, and the late ones are an hour old and come in batch 2 (after
two batches of on-time orders).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta, timezone

from tests.runtime.shop import CURRENCIES, valid_order

PER_BATCH = 100
WATERMARK, WINDOW, BIG = timedelta(minutes=10), timedelta(minutes=1), 100.0
EPOCH = datetime(1970, 1, 1)

#: lines a decode must refuse, each for its own reason
BAD = [
    "not an order",
    json.dumps(["o-x", "ann"]),
    json.dumps({"order_id": "x1", "customer": "ann", "amount": -4.0, "currency": "EUR", "order_time": "2026-01-01T00:00:00Z"}),
    json.dumps({"order_id": "x2", "customer": "bob", "amount": 9.0, "currency": "JPY", "order_time": "2026-01-01T00:00:00Z"}),
    json.dumps({"order_id": "x3", "amount": 9.0, "currency": "EUR", "order_time": "2026-01-01T00:00:00Z"}),
    json.dumps({"order_id": "x4", "customer": "cyd", "amount": "lots", "currency": "USD", "order_time": "2026-01-01T00:00:00Z"}),
    json.dumps({"order_id": "x5", "customer": "dee", "amount": 1.0, "currency": "GBP", "order_time": "yesterday"}),
    json.dumps({"order_id": " ", "customer": "eve", "amount": 1.0, "currency": "GBP", "order_time": "2026-01-01T00:00:00Z"}),
]


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def order_lines(start: datetime, count: int = 300) -> list[str]:
    """``count`` orders 2 s apart from ``start`` (naive UTC), every 20th sent twice, the bad lines spread among
    them, and six orders an hour old in the third batch."""
    lines: list[str] = []
    for i in range(count):
        order = {"order_id": f"o-{i:04d}", "customer": f"c{i % 7}", "amount": round((i * 37) % 250 + 0.5, 2),
                 "currency": CURRENCIES[i % 3], "order_time": _iso(start + timedelta(seconds=2 * i))}
        lines.append(json.dumps(order))
        if i % 20 == 7:
            lines.append(json.dumps(order))
        if i % 37 == 5 and i // 37 < len(BAD):
            lines.append(BAD[i // 37])
    for k in range(6):
        late = {"order_id": f"late-{k}", "customer": f"c{k}", "amount": 50.0 + 40 * k, "currency": CURRENCIES[k % 3],
                "order_time": _iso(start - timedelta(hours=1) + timedelta(minutes=k))}
        lines.insert(2 * PER_BATCH + 9 * k, json.dumps(late))
    return lines


def parse(line: str) -> tuple | None:
    """(order_id, customer, amount, currency, naive UTC order_time) of a valid order, else None."""
    order = valid_order(line)
    if order is None:
        return None
    when = datetime.fromisoformat(order["order_time"].replace("Z", "+00:00")).astimezone(timezone.utc)
    return order["order_id"], order["customer"], float(order["amount"]), order["currency"], when.replace(tzinfo=None)


def _window(t: datetime) -> tuple[datetime, datetime]:
    start = EPOCH + (t - EPOCH) // WINDOW * WINDOW
    return start, start + WINDOW


def expected(lines: list[str]) -> dict:
    """Every output: big {id: row}, revenue {(start, end, currency): (amount, orders)}, late {id: row},
    dead-letters [payload]."""
    newest: list[datetime | None] = []
    seen, big, late, dead = set(), {}, {}, []
    revenue: dict[tuple, list] = defaultdict(lambda: [0.0, 0])
    for k in range(0, len(lines), PER_BATCH):
        batch = k // PER_BATCH
        before = [t for t in newest[:max(batch - 1, 0)] if t is not None]
        bound = max(before) - WATERMARK if before else None
        orders = []
        for line in lines[k:k + PER_BATCH]:
            order = parse(line)
            if order is None:
                dead.append(line)
                continue
            orders.append(order)
            order_id, customer, amount, currency, when = order
            if bound is not None and when <= bound:
                late.setdefault(order_id, (customer, amount, currency, when, *_window(when)))
            elif order_id not in seen:
                seen.add(order_id)
                if amount >= BIG:
                    big[order_id] = (customer, amount, currency, when)
                total = revenue[(*_window(when), currency)]
                total[0], total[1] = total[0] + amount, total[1] + 1
        newest.append(max((o[4] for o in orders), default=None))
    return {"big": big, "late": late, "dead-letters": sorted(dead),
            "revenue": {key: (round(a, 6), n) for key, (a, n) in revenue.items()}}
