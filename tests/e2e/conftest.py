"""What the crash and cluster tests share: one Redis stream of known events, written once by the CLI
producer, and a Spark standalone cluster on loopback: a master and two one-core workers.

The workers run with an environment that hides this virtual environment: the Python they find
(``python3.X`` on their PATH) cannot import speedlayer, pandas or pyarrow, so a job only runs there
if speedlayer ships them (checked once in ``cluster``, so that a passing test means shipping worked).
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

from speedlayer.runtime.shipping import CACHE_ENV
from speedlayer.testing.cluster import StandaloneCluster, bare_environment
from tests import servers
from tests.conftest import TEST_JVM_OPTIONS

#: events in the streams: 100 s of event time (rate=200), 100 vehicles
N = 20_000
SHARDS = 2
GENERATOR = "generator://?seed=23&late=0&rate=200&vehicles=100"
#: rows per Arrow record batch in the outage tests: a sink's writes are that small (see ``small_writes``)
ROWS_PER_WRITE = 20
#: the cluster: workers of one core each
WORKERS, CORES = 2, 1
PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"


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



@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    bare = bare_environment()
    probe = subprocess.run([PYTHON, "-c", "import speedlayer"], env=bare, capture_output=True, text=True,
                           cwd=tmp_path_factory.mktemp("probe"))
    assert probe.returncode != 0, "the workers' Python imports speedlayer: shipping would not be tested"
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), workers=WORKERS, cores=CORES, memory="1g",
                           java_options=TEST_JVM_OPTIONS) as running:
        yield running


@pytest.fixture(scope="session")
def ship_cache(tmp_path_factory):
    """One packed environment for the session's cluster runs (built by the first one)."""
    return tmp_path_factory.mktemp("ship-cache")


@pytest.fixture
def cluster_env(ship_cache, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(ship_cache))
