"""A sink's server lost inside a write (PostgreSQL, MariaDB, Redis): ridden through, or given up and restarted.

The fleet job reads landing files (one per micro-batch, events written in plain Python by
``tests.e2e.fleet_input``) and writes its alerts through a ``TcpProxy`` in front of the real
server. Each Arrow record batch of ``ROWS_PER_WRITE`` rows is one write (a transaction, or one Lua
call for Redis; see ``small_writes``), so a partition of a batch (~125 alerts) takes several. The
proxy holds the first writer about to send its second commit of the batch of file ``CUT_FILE`` —
one write of that batch is in, the next is not — and the test takes the proxy down right there:
refused and lost connections.

- Short outage (back after ``OUTAGE_S``, well within ``retry_for``): the batch retries and the run
  goes on, no restart.
- Long outage (past ``retry_for=3s``): the query fails with one line naming the server; the proxy
  comes back and the same run restarts from its state directory.

Both end with the stored alerts equal to the plain oracle: no alert missing, none twice.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from speedlayer.core.errors import QueryFailedError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests import servers
from tests.e2e.fleet_input import INGEST, event_files, expected_alerts
from tests.e2e.killing import QueryState, mysql_rows, postgres_rows, query_state
from tests.helpers import land_files
from tests.sinks.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

FILES, PER_FILE, CUT_FILE = 4, 300, 2
OUTAGE_S, HELD_WITHIN_S = 1.5, 180


@dataclass(frozen=True)
class Database:
    """A sink's server as the test sees it: where it is, how its writer commits, what it stores."""

    kind: str
    service: servers.Service
    fixture: str
    #: what a writer sends to make one record batch durable, once per write
    commit: bytes

    def database(self, url) -> str:
        return url[1] if self.kind == "redis" else url.rsplit("/", 1)[1]

    def sink(self, url, port: int, retry_for: str) -> str:
        base = url[0] if self.kind == "redis" else url
        base = base.replace(f":{self.service.port}/", f":{port}/")
        where = f"stream={url[1]}:alerts" if self.kind == "redis" else "table=alerts"
        return f"{base}?{where}&retry_for={retry_for}"

    def what(self, url, port: int) -> str:
        """How the sink names the server in its messages."""
        if self.kind == "redis":
            return f"Redis at 127.0.0.1:{port}/0 {url[1]}:alerts"
        return f"{'PostgreSQL' if self.kind == 'postgres' else 'MySQL'} at 127.0.0.1:{port}/{self.database(url)}"

    def stored(self, url) -> list[tuple[str, float]]:
        """(event_id, excess_kmh) of every alert stored, read directly from the server (copies kept)."""
        if self.kind == "redis":
            import redis

            client = redis.Redis(host=self.service.host, port=self.service.port, decode_responses=True)
            try:
                return [(f["event_id"], float(f["excess_kmh"])) for _, f in client.xrange(f"{url[1]}:alerts")]
            finally:
                client.close()
        read = postgres_rows if self.kind == "postgres" else mysql_rows
        return [(event_id, float(excess)) for event_id, excess in read(url, "alerts", ["event_id", "excess_kmh"])]


DATABASES = {
    "postgres": Database("postgres", servers.POSTGRES, "postgres_url", b"COMMIT\x00"),  # a Query message's end
    "mysql": Database("mysql", servers.MARIADB, "mysql_url", b"\x03COMMIT"),  # COM_QUERY "COMMIT"
    "redis": Database("redis", servers.REDIS, "redis_url", b"EVALSHA"),  # the stream's Lua call
}


@pytest.fixture(params=list(DATABASES))
def database(request) -> tuple[Database, object]:
    db = DATABASES[request.param]
    return db, request.getfixturevalue(db.fixture)


def fleet_settings(tmp_path: Path, sink: str) -> RunSettings:
    return RunSettings(job="fleet", source=f"files://{tmp_path / 'landing'}?max_files_per_trigger=1",
                       trigger="processing:0s", sinks={"alerts": sink}, state_dir=str(tmp_path / "state"))


def cut_inside_a_write(run: Run, proxy: TcpProxy, db: Database, files: list[list[str]], tmp_path: Path) -> QueryState:
    """Land file CUT_FILE with the trap armed; once a writer is held at its second commit, take the proxy
    down (that commit never reaches the server). Returns the query's checkpoint at that moment."""
    trap = proxy.hold_at(db.commit, occurrence=2)
    land_files(tmp_path / "landing", [files[CUT_FILE]], INGEST, first=CUT_FILE)
    query, deadline = run.queries[0], time.monotonic() + HELD_WITHIN_S
    while not trap.sprung.wait(0.1):
        assert query.isActive and time.monotonic() < deadline, f"no writer held at its second commit: {query.exception()}"
    held = query_state(tmp_path / "state" / "checkpoints" / "alerts")
    proxy.down()
    trap.release.set()
    return held


def assert_cut_mid_write(stored: list[tuple[str, float]], files: list[list[str]], held: QueryState) -> None:
    """The moment claimed: a batch planned and not committed, every alert of the files before it stored,
    some but not all of its own."""
    before, through = expected_alerts(files[:CUT_FILE]), expected_alerts(files[:CUT_FILE + 1])
    got = {event_id for event_id, _ in stored}
    assert held.in_flight is not None, held
    assert len(got) == len(stored) and set(before) <= got <= set(through)
    in_batch, of_batch = len(got) - len(before), len(through) - len(before)
    assert 0 < in_batch < of_batch, (in_batch, of_batch)
    print(f"cut in batch {held.in_flight}: {in_batch} of its {of_batch} alerts stored, {len(before)} before it")


def assert_exact(stored: list[tuple[str, float]], expected: dict[str, float]) -> None:
    """Every expected alert once, with its value, and nothing else."""
    copies: dict[str, list[float]] = {}
    for event_id, excess in stored:
        copies.setdefault(event_id, []).append(excess)
    assert [e for e, values in copies.items() if len(values) > 1] == []
    assert sorted(set(expected) - set(copies)) == [] and sorted(set(copies) - set(expected)) == []
    assert {e: values[0] for e, values in copies.items()} == pytest.approx(expected, abs=1e-9)


@contextmanager
def stopped_on_error(run: Run):
    """Stop the run if the block fails (a run with a processing trigger never ends by itself)."""
    try:
        yield
    except BaseException:
        run.stop_requested.set()
        with suppress(Exception):
            run.wait()
        raise


def run_through(run: Run, tmp_path: Path, files: list[list[str]], first: int) -> str:
    """Land files[first:], wait until the run has processed them, stop it; how it stopped."""
    try:
        land_files(tmp_path / "landing", files[first:], INGEST, first=first)
        run.queries[0].processAllAvailable()
    finally:
        run.stop_requested.set()
    return run.wait().stopped_by


def test_a_short_outage_inside_a_write_is_ridden_through_exactly(database, spark, small_writes, tmp_path):
    db, url = database
    files = event_files(FILES, PER_FILE)
    land_files(tmp_path / "landing", files[:CUT_FILE], INGEST)
    with TcpProxy((db.service.host, db.service.port)) as proxy:
        run = Run(spark, plan_run(fleet_settings(tmp_path, db.sink(url, proxy.port, "60s"))))
        run.start()
        with stopped_on_error(run):
            run.queries[0].processAllAvailable()
            held = cut_inside_a_write(run, proxy, db, files, tmp_path)
            at_cut = db.stored(url)
            proxy.up_after(OUTAGE_S)
        assert run_through(run, tmp_path, files, CUT_FILE + 1) == "stop requested"
    assert_cut_mid_write(at_cut, files, held)
    history = run.tracker.get(run.plan.queries[0].name).history
    cut_batch = next(p for p in history if p["batchId"] == held.in_flight)
    assert cut_batch["durationMs"]["addBatch"] >= OUTAGE_S * 1000  # it waited for the server, then went on
    assert_exact(db.stored(url), expected_alerts(files))


def test_an_outage_past_retry_for_fails_in_one_line_and_a_restart_is_exact(database, spark, small_writes, tmp_path):
    db, url = database
    files = event_files(FILES, PER_FILE)
    land_files(tmp_path / "landing", files[:CUT_FILE], INGEST)
    with TcpProxy((db.service.host, db.service.port)) as proxy:
        settings = fleet_settings(tmp_path, db.sink(url, proxy.port, "3s"))
        run = Run(spark, plan_run(settings))
        run.start()
        with stopped_on_error(run):
            run.queries[0].processAllAvailable()
            held = cut_inside_a_write(run, proxy, db, files, tmp_path)
        with pytest.raises(QueryFailedError) as failed:
            run.wait()
        at_cut = db.stored(url)
        proxy.up()
        again = Run(spark, plan_run(settings))
        again.start()
        assert run_through(again, tmp_path, files, CUT_FILE + 1) == "stop requested"
    message = str(failed.value)
    print(message)
    assert message.startswith(f"query fleet_alerts failed: lost {db.what(url, proxy.port)} for "), message
    assert "(retry_for=3s)" in message and "\n" not in message
    assert_cut_mid_write(at_cut, files, held)
    assert query_state(tmp_path / "state" / "checkpoints" / "alerts").committed > held.in_flight
    assert again.tracker.get(again.plan.queries[0].name).history[0]["batchId"] == held.in_flight  # replayed first
    assert_exact(db.stored(url), expected_alerts(files))


#: how long a write may take to give up on a server that went silent, with retry_for=1s
SILENT_GIVEN_UP_WITHIN_S = 15


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_a_server_gone_silent_inside_a_write_is_given_up_after_retry_for(kind, request, spark, small_writes):
    from speedlayer.sinks import open_sink
    from tests.sinks.common import ALERTS_SCHEMA, alerts_frame, target

    db = DATABASES[kind]
    url = request.getfixturevalue(db.fixture)
    with TcpProxy((db.service.host, db.service.port)) as proxy:
        write = open_sink(db.sink(url, proxy.port, "1s")).batch_function(ALERTS_SCHEMA, target("alerts"))
        trap = proxy.hold_at(db.commit, occurrence=2)  # never released: that commit gets no answer and no reset
        writing = threading.Thread(target=suppressed(write), args=(alerts_frame(spark, 200), 0), daemon=True)
        writing.start()
        assert trap.sprung.wait(HELD_WITHIN_S), "no writer reached its second commit"
        writing.join(SILENT_GIVEN_UP_WITHIN_S)
        still_waiting = writing.is_alive()
    writing.join(60)  # the proxy's exit cut the connection: the write's retries end it
    assert not still_waiting, f"the write still waits for the silent {db.kind} server {SILENT_GIVEN_UP_WITHIN_S}s later"


def suppressed(function):
    """``function`` with any exception swallowed (a thread's outcome is read from its liveness)."""
    def call(*args):
        with suppress(Exception):
            function(*args)
    return call
