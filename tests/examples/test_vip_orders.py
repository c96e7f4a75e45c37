"""The stream-static join example (examples/stream-static/vip_orders.py), shown whole in docs/extending.md:
run as a stream over landed orders, each output equals a plain-Python oracle over the input and the table."""

import csv
import importlib
import io
import json
from collections import defaultdict
from datetime import datetime, timedelta

import speedlayer
from speedlayer.runtime.shipping import CACHE_ENV
from tests.conftest import ROOT
from tests.helpers import land_files

EXAMPLE = ROOT / "examples" / "stream-static" / "vip_orders.py"
T0 = datetime(2026, 3, 1, 9, 0, 0)  # naive UTC, as Spark hands timestamps to Python here
CUSTOMERS = "customer,tier\nc0,gold\nc1,silver\nc2,gold\n"  # c3 and c4 are not in it


def load_example(monkeypatch, tmp_path):
    """The example's module, imported as ``speedlayer run vip_orders:VIP`` imports it from its directory."""
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))  # where the run zips the module for the Python workers
    return importlib.import_module("vip_orders")


def orders() -> list[str]:
    lines = [json.dumps({"order_id": f"o{i}", "customer": f"c{i % 5}", "amount": round(3.5 * i + 1, 2),
                         "order_time": (T0 + timedelta(seconds=7 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")})
             for i in range(40)]
    return lines[:20] + [lines[4], "not an order"] + lines[20:]  # o4 re-sent; a line that is no order


def oracle(lines: list[str], customers_csv: str) -> dict:
    tiers = {row["customer"]: row["tier"] for row in csv.DictReader(io.StringIO(customers_csv))}
    kept, seen = [], set()
    for line in lines:
        try:
            order = json.loads(line)
        except ValueError:
            continue
        if order["order_id"] not in seen:
            seen.add(order["order_id"])
            kept.append((order["order_id"], order["customer"], order["amount"],
                         datetime.strptime(order["order_time"], "%Y-%m-%dT%H:%M:%SZ")))
    watermark = max(t for *_, t in kept) - timedelta(seconds=10)
    revenue = defaultdict(lambda: [0.0, 0])
    for _, customer, amount, t in kept:
        start = t.replace(second=0)
        revenue[(start, start + timedelta(minutes=1), tiers.get(customer, "none"))][0] += amount
        revenue[(start, start + timedelta(minutes=1), tiers.get(customer, "none"))][1] += 1
    return {"tiered": {o: (c, tiers.get(c, "none"), a) for o, c, a, _ in kept},
            "tier-revenue": {k: (round(v[0], 6), v[1]) for k, v in revenue.items() if k[1] <= watermark}}


def test_the_docs_show_the_example_as_it_is():
    doc = (ROOT / "docs" / "extending.md").read_text()
    assert f"```python\n{EXAMPLE.read_text()}```" in doc


def test_the_example_joins_each_order_with_its_customers_tier(spark, tmp_path, monkeypatch):
    example = load_example(monkeypatch, tmp_path)
    (tmp_path / "customers.csv").write_text(CUSTOMERS)
    lines = orders()
    land_files(tmp_path / "landing", [lines], T0 + timedelta(hours=1))
    with speedlayer.run(example.VIP, source=f"files:{tmp_path / 'landing'}?format=json", trigger="available-now",
                        sinks={"tiered": "memory:vip_tiered", "tier-revenue": "memory:vip_revenue"}, spark=spark,
                        state_dir=str(tmp_path / "state"), options={"customers": str(tmp_path / "customers.csv")}) as run:
        run.wait()
    expected = oracle(lines, CUSTOMERS)
    tiered = {r.order_id: (r.customer, r.tier, r.amount) for r in spark.table("vip_tiered").collect()}
    assert tiered == expected["tiered"] and {t for _, t, _ in tiered.values()} == {"gold", "silver", "none"}
    revenue = {(r.window_start, r.window_end, r.tier): (round(r.amount, 6), r.orders)
               for r in spark.table("vip_revenue").collect()}
    assert revenue == expected["tier-revenue"] and len(revenue) > 5
    # on a cluster, the table's directory is one the executors must share
    assert example.VIP.shared_paths(speedlayer.Params(options=example.VipOptions(customers=str(tmp_path / "x.csv")))) \
        == {"--customers": tmp_path}
