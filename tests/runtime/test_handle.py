"""``speedlayer.run`` from Python: a user's own job (not registered) over JSON lines, checked against plain Python."""

from datetime import datetime

import pytest

import speedlayer
from speedlayer.runtime.shipping import CACHE_ENV
from tests.runtime.shop import SHOP, expected, order_lines


@pytest.fixture
def landing(tmp_path, monkeypatch):
    """A landing directory holding the orders as one JSON-lines file; the input lines and their oracle."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))  # the job's code is zipped for the Python workers
    lines = order_lines()
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "orders.jsonl").write_text("\n".join(lines) + "\n")
    return f"files://{tmp_path / 'landing'}?format=json", lines


def totals_of(rows) -> dict:
    return {(r.customer, r.currency): (r.orders, round(r.amount, 6)) for r in rows}


def test_run_writes_what_plain_python_computes_dead_letters_included(spark, landing, tmp_path):
    source, lines = landing
    orders, totals, malformed = expected(lines)
    assert len(orders) == 60 and len(malformed) == 6

    handle = speedlayer.run(SHOP, source=source, trigger="available-now", spark=spark, state_dir=str(tmp_path / "state"),
                            sinks={"orders": f"parquet:{tmp_path / 'orders'}", "totals": "memory:api_shop_totals",
                                   "dead-letters": "memory:api_shop_dead"})
    summary = handle.wait()

    assert summary.stopped_by == "end of input" and handle.summary is summary and not handle.running
    written = spark.read.parquet(str(tmp_path / "orders")).collect()
    assert sorted((r.order_id, r.customer, r.amount, r.currency) for r in written) == \
        sorted((o["order_id"], o["customer"], o["amount"], o["currency"]) for o in orders)
    assert {r.order_id: r.order_time for r in written} == {
        o["order_id"]: datetime.fromisoformat(o["order_time"].replace("Z", "")) for o in orders}
    assert totals_of(spark.table("api_shop_totals").collect()) == {k: (n, round(a, 6)) for k, (n, a) in totals.items()}
    assert sorted(r.payload for r in spark.table("api_shop_dead").collect()) == sorted(malformed)
    status = handle.status()
    assert set(status) == {"orders", "totals", "dead-letters"}
    assert all(s.batches >= 1 and s.last_batch_id >= 0 and not s.active for s in status.values())
    assert {q.output: q.mode for q in summary.queries} == {"orders": "append", "totals": "complete", "dead-letters": "append"}


def test_with_stops_a_running_job_gracefully_by_reference(spark, landing, tmp_path):
    source, lines = landing
    _, totals, _ = expected(lines)
    with speedlayer.run("tests.runtime.shop:SHOP", source=source, spark=spark, trigger="processing:0s",
                        sinks={"totals": "memory:api_shop_live"}, state_dir=str(tmp_path / "state")) as handle:
        handle.process_all_available()
        assert handle.running and handle.status()["totals"].active
        assert totals_of(spark.table("api_shop_live").collect()) == {k: (n, round(a, 6)) for k, (n, a) in totals.items()}
    assert handle.summary.stopped_by == "stop requested"
    assert not handle.running and not handle.status()["totals"].active
    assert not any(q.isActive for q in handle.queries)
    assert spark.sparkContext._jsc is not None  # a session it was given is left running


def test_a_mistake_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(speedlayer.ConfigError, match=r"unknown setting 'windw': known settings are job, job_file, source"):
        speedlayer.run(SHOP, windw="10s")
    with pytest.raises(speedlayer.ConfigError, match=r"job 'shop' has no output 'nope': its outputs are orders, totals"):
        speedlayer.run(SHOP, sinks={"nope": "console:"})
    with pytest.raises(speedlayer.ConfigError, match=r"unknown trigger 'soon'"):
        speedlayer.run("tests.runtime.shop:SHOP", trigger="soon")
