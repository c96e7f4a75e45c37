"""A job file that joins its stream with reference tables it declares: the results equal a plain-Python
oracle, and a pinned table keeps its rows while a refreshed one is read again at every micro-batch."""

import csv
import io
import json
from collections import defaultdict
from datetime import timedelta

import pytest

import speedlayer
from speedlayer.pipelines.job_file import load_job_file
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import land_files
from tests.pipelines.job_file.orders import INGEST, ORDERS_YAML, decode_line, input_files

#: the orders job file's schema, with tables and outputs that join them
JOB = ORDERS_YAML.split("default_outputs:")[0] + """\
variables:
  rates_dir: {summary: "directory of today's currency rates"}
references:
  customers:
    path: ref/customers.csv
    options: {delimiter: ";"}
  rates: {path: "${rates_dir}/rates.jsonl"}
outputs:
  vip:
    sql: |
      SELECT e.order_id, c.tier, e.amount, round(e.amount * r.to_eur, 2) AS amount_eur
      FROM events e JOIN customers c ON e.customer_id = c.customer_id
      LEFT JOIN rates r ON e.currency = r.currency
      WHERE c.tier <> 'basic'
    key: [order_id]
  eur-revenue:
    sql: |
      SELECT window(e.order_time, '1 minute') AS window, sum(e.amount * r.to_eur) AS eur, count(*) AS orders
      FROM events e JOIN rates r USING (currency)
      GROUP BY window(e.order_time, '1 minute')
    key: [window_start, window_end]
"""
CUSTOMERS = "customer_id;tier\nc0;gold\nc1;silver\nc2;basic\n"  # c3 has no row: the inner join drops its orders
RATES = [{"currency": "EUR", "to_eur": 1.0}, {"currency": "USD", "to_eur": 0.9}]  # GBP none: a null amount_eur


def oracle(files, customers_csv: str, rates: list[dict]) -> dict:
    """Both outputs from the input lines, the CSV text and the rates, in plain Python."""
    tiers = {row["customer_id"]: row["tier"] for row in csv.DictReader(io.StringIO(customers_csv), delimiter=";")}
    to_eur = {r["currency"]: r["to_eur"] for r in rates}
    orders, seen = [], set()
    for lines in files:
        for line in lines:
            order, reason = decode_line(line, INGEST)
            if reason is None and order["order_id"] not in seen:
                seen.add(order["order_id"])
                orders.append(order)
    vip = {o["order_id"]: (tiers[o["customer_id"]], o["amount"],
                           round(o["amount"] * to_eur[o["currency"]], 2) if o["currency"] in to_eur else None)
           for o in orders if tiers.get(o["customer_id"], "basic") != "basic"}
    watermark = max(o["order_time"] for o in orders) - timedelta(seconds=10)
    windows = defaultdict(lambda: [0.0, 0])
    for o in orders:
        if o["currency"] in to_eur:
            start = o["order_time"].replace(second=0, microsecond=0)
            windows[(start, start + timedelta(minutes=1))][0] += o["amount"] * to_eur[o["currency"]]
            windows[(start, start + timedelta(minutes=1))][1] += 1
    return {"vip": vip, "eur-revenue": {k: (round(v[0], 6), v[1]) for k, v in windows.items() if k[1] <= watermark}}


@pytest.fixture
def job_dir(tmp_path):
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "customers.csv").write_text(CUSTOMERS)
    (tmp_path / "today").mkdir()
    (tmp_path / "today" / "rates.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RATES))
    (tmp_path / "orders.yaml").write_text(JOB)
    return tmp_path


def test_a_job_file_joins_its_reference_tables_by_name(spark, job_dir):
    files = input_files()
    land_files(job_dir / "landing", files, INGEST)
    settings = RunSettings(job_file=str(job_dir / "orders.yaml"), source=f"files:{job_dir / 'landing'}?format=json",
                           trigger="available-now", state_dir=str(job_dir / "state"),
                           options={"rates_dir": str(job_dir / "today")},
                           sinks={"vip": "memory:ref_vip", "eur-revenue": "memory:ref_revenue"})
    Run(spark, plan_run(settings)).start_and_wait()
    expected = oracle(files, CUSTOMERS, RATES)
    vip = {r.order_id: (r.tier, r.amount, r.amount_eur) for r in spark.table("ref_vip").collect()}
    assert vip == expected["vip"]
    assert {t for t, _, _ in vip.values()} == {"gold", "silver"} and any(e is None for _, _, e in vip.values())
    revenue = {(r.window_start, r.window_end): (round(r.eur, 6), r.orders) for r in spark.table("ref_revenue").collect()}
    assert revenue == expected["eur-revenue"] and len(revenue) > 3


@pytest.mark.parametrize("refresh", [False, True])
def test_a_pinned_table_keeps_its_rows_and_a_refreshed_one_is_read_again(spark, job_dir, refresh):
    text = JOB.replace('options: {delimiter: ";"}', f'options: {{delimiter: ";"}}\n    refresh: {str(refresh).lower()}')
    (job_dir / "orders.yaml").write_text(text)
    first, second = input_files()
    land_files(job_dir / "landing", [first], INGEST)
    with speedlayer.run(load_job_file(job_dir / "orders.yaml"), source=f"files:{job_dir / 'landing'}?format=json",
                        sinks={"vip": f"memory:vip_{refresh}"}, trigger="processing:0s", spark=spark,
                        state_dir=str(job_dir / "state"), options={"rates_dir": str(job_dir / "today")}) as handle:
        handle.process_all_available()
        promoted = CUSTOMERS.replace("c2;basic", "c2;gold ")  # the same length: Spark re-reads what it listed
        (job_dir / "ref" / "customers.csv").write_text(promoted)
        land_files(job_dir / "landing", [second], INGEST, first=1)
        handle.process_all_available()
    rows = {r.order_id: r.tier for r in spark.table(f"vip_{refresh}").collect()}
    before = oracle([first], CUSTOMERS, RATES)["vip"]
    after = oracle([first, second], promoted if refresh else CUSTOMERS, RATES)["vip"]
    in_first = {order["order_id"] for order, reason in (decode_line(line, INGEST) for line in first) if reason is None}
    expected = {**{k: v[0] for k, v in before.items()}, **{k: v[0] for k, v in after.items() if k not in in_first}}
    assert rows == expected
    assert any(t == "gold " for t in rows.values()) is refresh  # c2's orders of the second file, only when refreshed
