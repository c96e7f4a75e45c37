"""A job file end to end: ``python -m speedlayer run --job-file`` from a Redis stream into PostgreSQL.

The orders (good ones, a re-sent one, bad ones of every kind) are added to a Redis stream; a
bounded CLI run writes every output into its own PostgreSQL table, and each table must hold what
the plain-Python oracle computes from the same lines.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.e2e.killing import postgres_rows
from tests.pipelines.job_file.orders import FIELDS, ORDERS_YAML, input_files, oracle

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def naive_utc(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None)


def test_a_job_file_from_redis_into_postgresql_equals_the_oracle(run_cli, tmp_path, redis_url, postgres_url):
    import redis

    url, prefix = redis_url
    stream = f"{prefix}_orders"
    # Redis stamps each entry with its clock (the ingest time): the orders lie half an hour behind it
    ingest = datetime.now(timezone.utc).replace(tzinfo=None)
    files = input_files((ingest - timedelta(minutes=30)).replace(second=0, microsecond=0), ingest)
    lines = [line for lines in files for line in lines]
    client = redis.Redis.from_url(url)
    for line in lines:
        client.xadd(stream, {"value": line})
    client.close()
    (tmp_path / "orders.yaml").write_text(ORDERS_YAML)

    outputs = ("revenue", "big-orders", "per-customer", "dead-letters")
    result = run_cli("run", "orders.yaml", "--source", f"{url}?stream={stream}", *[
        arg for name in outputs for arg in ("--sink", f"{name}={postgres_url}")],
        "--output-mode", "revenue=update", "--max-events", str(len(lines)), "--state-dir", "st", "--no-live",
        "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.enabled=false",
        timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert f"stopped by --max-events {len(lines)}" in result.stdout
    expected = oracle(files, ingest)

    revenue = {(naive_utc(s), naive_utc(e), c): (round(r, 6), n) for s, e, c, r, n in postgres_rows(
        postgres_url, "revenue", ["window_start", "window_end", "currency", "revenue", "orders"])}
    assert revenue == expected["windows"] and len(revenue) > 10  # update mode: every window's final row
    big = {row[0]: (*row[1:-1], naive_utc(row[-1])) for row in postgres_rows(postgres_url, "big_orders", list(FIELDS))}
    assert big == expected["big-orders"]
    customers = {c: (n, round(s, 6)) for c, n, s in postgres_rows(postgres_url, "per_customer",
                                                                 ["customer_id", "orders", "spent"])}
    assert customers == expected["per-customer"]
    dead = sorted(postgres_rows(postgres_url, "dead_letters", ["payload", "reason"]))
    assert dead == expected["dead-letters"] and len(dead) == 10
