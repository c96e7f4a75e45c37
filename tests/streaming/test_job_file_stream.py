"""A job file as a stream: JSON lines landed in files, every output checked against the plain-Python oracle."""

from datetime import datetime

import pytest

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests.helpers import land_files
from tests.pipelines.job_file.orders import FIELDS, INGEST, ORDERS_YAML, input_files, oracle


@pytest.fixture(scope="module")
def landed(tmp_path_factory):
    """The orders' landing directory and job file, written once for the module."""
    root = tmp_path_factory.mktemp("orders")
    files = input_files()
    land_files(root / "landing", files, INGEST)
    job_file = root / "orders.yaml"
    job_file.write_text(ORDERS_YAML)
    return root, job_file, files


def test_every_output_of_a_job_file_equals_the_oracle(spark, landed, tmp_path):
    root, job_file, files = landed
    settings = RunSettings(job_file=str(job_file), source=f"files:{root / 'landing'}?format=json", trigger="available-now",
                           state_dir=str(tmp_path / "state"),
                           sinks={"revenue": "memory:jf_revenue", "big-orders": f"parquet:{tmp_path / 'big'}",
                                  "per-customer": "memory:jf_customers", "dead-letters": "memory:jf_dead"},
                           output_mode={"per-customer": "complete"})
    plan = plan_run(settings)
    run = Run(spark, plan)
    summary = run.start_and_wait()
    assert summary.stopped_by == "end of input"
    expected = oracle(files)

    revenue = {(r.window_start, r.window_end, r.currency): (round(r.revenue, 6), r.orders)
               for r in spark.table("jf_revenue").collect()}
    assert revenue == expected["revenue"] and len(revenue) > 5
    big = {r.order_id: tuple(r[f] for f in FIELDS[1:]) for r in spark.read.parquet(str(tmp_path / "big")).collect()}
    assert big == expected["big-orders"] and any(v[3] is not None for v in big.values())  # some with a coupon
    customers = {r.customer_id: (r.orders, round(r.spent, 6)) for r in spark.table("jf_customers").collect()}
    assert customers == expected["per-customer"]
    dead = sorted((r.payload, r.reason) for r in spark.table("jf_dead").collect())
    assert dead == expected["dead-letters"] and len(dead) == 10

    watermarks = {q.output: q.watermark for q in summary.queries}
    assert datetime.fromisoformat(watermarks["revenue"].replace("Z", "")) == expected["watermark"]
    # the run learned which outputs keep state from their query plans (the dedup keeps state for all but dead letters)
    assert {name: output.stateful for name, output in run.outputs.items()} == {
        "revenue": True, "big-orders": True, "per-customer": True, "dead-letters": False}
