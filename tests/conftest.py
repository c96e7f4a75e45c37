"""One SparkSession for the whole test session; helpers shared by the suites."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
#: Java options of every JVM the tests start (this session's, the CLI's, the test cluster's): the tests
#: run small data, where C1 alone compiles enough and a serial collector wastes no threads on 2 cores;
#: their temporary files go where the run's do (tests/servers.py gives a run one directory). C1 alone
#: reserves a code cache of 48 MB, which a test process's hundreds of queries fill: the JVM then stops
#: compiling and fails making method handles (the SparkContext shut down mid-test); 240 MB is reserved, not used.
TEST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC "
                    f"-Djava.io.tmpdir={tempfile.gettempdir()}")
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)  # read by spark-submit, which starts each driver JVM
#: test modules that start many processes of their own (the standalone cluster, killed runs): under
#: ``pytest -n 2 --dist loadgroup`` one test process runs them all, one after another
HEAVY_MODULES = frozenset({"tests/e2e/test_cluster.py", "tests/e2e/test_lost_worker.py",
                           "tests/e2e/test_your_own_job.py", "tests/e2e/test_fault_matrix.py"})
#: modules that share a session-scoped fixture: one unit of work, so that the fixture runs once
SHARING = {"tests/cli/test_sql.py": "finished fleet run", "tests/monitor/test_sql_views.py": "finished fleet run"}
#: the modules that take a minute or more, the longest first: handed out right after the heavy ones, so
#: that a worker's last units are short ones and neither waits long for the other at the end
LONG_MODULES = ("tests/sinks/test_state_outputs_sql.py", "tests/bench/test_soak_smoke.py",
                "tests/runtime/test_shared.py", "tests/pipelines/test_fraud.py", "tests/runtime/test_class_archive.py",
                "tests/e2e/test_kafka_broker_restart.py", "tests/e2e/test_app_actions_kill.py",
                "tests/e2e/test_cli_run.py", "tests/e2e/test_database_outage.py", "tests/e2e/test_sql_live.py",
                "tests/streaming/test_state_windows_stream.py", "tests/e2e/test_secrets_sweep.py",
                "tests/sinks/test_postgres.py", "tests/e2e/test_resume_cli.py", "tests/sinks/test_refused_rows.py",
                "tests/runtime/test_package_lock.py", "tests/bench/test_bench_smoke.py", "tests/e2e/test_disk_full.py",
                "tests/streaming/test_incidents_stream.py", "tests/streaming/test_matches_stream.py")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` with the heavy modules as one group.

    pytest-xdist groups tests by a suffix it adds to ``item._nodeid``, which pytest 9 no longer
    reads (a node's id is ``item._id``): its ``xdist_group`` marks group nothing. This scheduler
    makes the heavy modules one unit of work, the modules in ``SHARING`` one each, and every other
    module a unit of its own, so a module-scoped fixture (one stream run for several tests) runs
    once, not once per process. The
    units go out longest first (the heavy unit, then ``LONG_MODULES``, then the rest as xdist orders
    them): xdist alone hands out the modules with the most tests first, which left the long modules
    with few tests, the heavy unit among them, for the end.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    first = ("heavy", *LONG_MODULES)

    class LongestFirst(OrderedDict):
        def popitem(self, last: bool = True):
            if last or not self:
                return super().popitem(last)
            scope = min(self, key=lambda s: first.index(s) if s in first else len(first))  # ties: xdist's order
            return scope, self.pop(scope)

    class HeavyTogether(LoadScopeScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.workqueue = LongestFirst()

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::")[0]
            return "heavy" if module in HEAVY_MODULES else SHARING.get(module, module)

    return HeavyTogether(config, log)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from speedlayer.sinks.delta import delta_conf, delta_package
    from speedlayer.sources.kafka_connector import connector_package
    from speedlayer.testing import local_session

    # Spark's Kafka connector and Delta Lake, as a run that reads kafka:// or writes delta: adds them
    session = local_session(log_file=tmp_path_factory.mktemp("spark-log") / "spark.log", conf=delta_conf(),
                            packages=[connector_package(), delta_package()])
    yield session
    session.stop()


@pytest.fixture
def run_cli(tmp_path):
    """Run the speedlayer CLI in a subprocess (a fresh JVM), in ``tmp_path``."""
    import subprocess

    def _run(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess:
        env = {**os.environ, "COLUMNS": "200"}
        return subprocess.run(
            [sys.executable, "-m", "speedlayer", *args],
            cwd=cwd or tmp_path, capture_output=True, text=True, timeout=timeout, env=env,
        )

    return _run


@pytest.fixture(scope="session")
def finished_fleet_run(spark, tmp_path_factory):
    """A bounded fleet run from JSON lines into Parquet: its state dir, out dir and input pings."""
    import json

    import speedlayer
    from tests.testing.events import fleet_pings

    tmp_path, pings = tmp_path_factory.mktemp("sql-run"), fleet_pings()
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "pings.jsonl").write_text("\n".join(json.dumps(p) for p in pings) + "\n")
    out = tmp_path / "out"
    handle = speedlayer.run("fleet", source=f"files://{tmp_path / 'landing'}?format=json", trigger="available-now",
                            spark=spark, state_dir=str(tmp_path / "state"),
                            sinks={"windows": f"parquet:{out / 'windows'}", "alerts": f"parquet:{out / 'alerts'}"})
    handle.wait()
    return tmp_path / "state", out, pings


# --- real servers (see tests/servers.py) --------------------------------------------------------

@pytest.fixture
def redis_url():
    """A Redis URL on the shared loopback server; the test's keys are removed after it."""
    from tests import servers

    servers.ensure(servers.REDIS)
    import redis

    db = 0
    client = redis.Redis(host=servers.REDIS.host, port=servers.REDIS.port, db=db)
    prefix = servers.unique_name("t")
    yield f"redis://{servers.REDIS.host}:{servers.REDIS.port}/{db}", prefix
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.close()


@pytest.fixture
def postgres_url():
    """A PostgreSQL URL of a fresh, uniquely named database, dropped after the test."""
    from tests import servers

    servers.ensure(servers.POSTGRES)
    import psycopg

    name = servers.unique_name("speedlayer")
    admin = f"postgresql://postgres@{servers.POSTGRES.host}:{servers.POSTGRES.port}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql://postgres@{servers.POSTGRES.host}:{servers.POSTGRES.port}/{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def mysql_url():
    """A MySQL/MariaDB URL of a fresh, uniquely named database, dropped after the test."""
    from tests import servers

    servers.ensure(servers.MARIADB)
    import pymysql

    name = servers.unique_name("speedlayer")
    admin = dict(host=servers.MARIADB.host, port=servers.MARIADB.port, user="root", password="")
    with closing_connection(pymysql.connect(**admin, autocommit=True)) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
    yield f"mysql://root@{servers.MARIADB.host}:{servers.MARIADB.port}/{name}"
    with closing_connection(pymysql.connect(**admin, autocommit=True)) as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def kafka():
    """Topics on the run's Kafka broker (tests/kafka_topics.py); the ones the test made are deleted after it."""
    from tests import servers
    from tests.kafka_topics import KafkaTopics

    servers.ensure(servers.KAFKA)
    topics = KafkaTopics(f"{servers.KAFKA.host}:{servers.KAFKA.port}")
    yield topics
    for name in topics.created:
        topics.delete(name)


@pytest.fixture
def kafka_topic(kafka):
    """(bootstrap servers, topic): a new topic of two partitions on the run's Kafka broker."""
    return kafka.bootstrap, kafka.create()


def closing_connection(conn):
    from contextlib import closing

    return closing(conn)


# --- plug-ins: packages "installed" for one test -------------------------------------------------

@pytest.fixture
def installed(tmp_path, monkeypatch):
    """``install(name, entry_points, modules)`` puts a distribution on ``sys.path`` for this test: a
    ``*.dist-info`` directory (METADATA, entry_points.txt) beside its modules, as pip leaves them.
    speedlayer's registries are reloaded before and after the test."""
    import importlib

    from speedlayer.core import plugins

    root = tmp_path / "site-packages"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)

    def install(name: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str] | None = None) -> Path:
        info = root / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{key} = {target}\n" for key, target in points.items()) + "\n"
            for group, points in entry_points.items()))
        for module, text in (modules or {}).items():
            (root / f"{module}.py").write_text(text)
        importlib.invalidate_caches()
        plugins.forget()
        return root

    plugins.forget()
    yield install
    plugins.forget()
    for name in set(sys.modules) - before:  # the next test's modules of the same name are others
        origin = getattr(getattr(sys.modules[name], "__spec__", None), "origin", None) or ""
        if origin.startswith(str(root)):
            del sys.modules[name]
