"""What the crash tests share: one Redis stream of known events, written once by the CLI producer."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

from tests import servers

#: events in the streams: 10 micro-batches of PER_TRIGGER; 100 s of event time (rate=200), 100 vehicles
N = 20_000
PER_TRIGGER = 2_000
SHARDS = 2
GENERATOR = "generator://?seed=23&late=0&rate=200&vehicles=100"
#: rows per Arrow record batch in the outage tests: a sink's writes are that small (see ``small_writes``)
ROWS_PER_WRITE = 20


@pytest.fixture(scope="session")
def stream(tmp_path_factory):
    """A Redis URI of SHARDS stream keys holding events 0 … N-1, written once by the CLI producer.

    Session-scoped (unlike ``redis_url``) so that the crash tests share one producer run; its keys are
    removed afterwards the same way.
    """
    servers.ensure(servers.REDIS)
    import redis

    prefix = servers.unique_name("eo")
    url = f"redis://{servers.REDIS.host}:{servers.REDIS.port}/0"
    uri = f"{url}?stream={prefix}&shards={SHARDS}"
    # A fixed event-time origin shortly before now: decode refuses events over 1 h ahead of the entry
    # ids, which Redis stamps with its clock.
    start = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:00Z")
    client = redis.Redis(host=servers.REDIS.host, port=servers.REDIS.port, db=0)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "speedlayer", "produce", "--to", uri, "--max-events", str(N), "--rate", "0",
             "--generator", GENERATOR, "--start", start, "--no-progress"],
            cwd=tmp_path_factory.mktemp("produce"), capture_output=True, text=True, timeout=300,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"produced {N:,} events" in result.stdout, result.stdout
        assert [client.xlen(f"{prefix}:{i}") for i in range(SHARDS)] == [N // SHARDS] * SHARDS
        yield uri
    finally:
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()


@pytest.fixture
def small_writes(spark):
    """Arrow record batches of ROWS_PER_WRITE rows in the queries the test starts: a sink that writes
    through ``mapInArrow`` (PostgreSQL, MySQL, Redis) then makes several writes per partition of a batch."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, str(ROWS_PER_WRITE))
    yield
    spark.conf.set(key, before)
