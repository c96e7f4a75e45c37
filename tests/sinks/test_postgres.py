"""The PostgreSQL sink against a real server: keyed tables, upserts, replays, retries, masked secrets."""

from __future__ import annotations

import sys
import time

import psycopg
import pytest
from psycopg import sql
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.sinks import open_sink
from tests import servers
from tests.helpers import batch_output, wait_for_batch
from tests.sinks.common import (
    ALERTS_SCHEMA,
    WINDOWS_SCHEMA,
    alerts_frame,
    as_frame,
    settings,
    target,
    unmoded,
    window,
    windows_frame,
)
from tests.sinks.tcp_proxy import TcpProxy


def rows(url: str, table: str, columns: list[str], schema: str | None = None) -> list[tuple]:
    name = sql.Identifier(schema, table) if schema else sql.Identifier(table)
    with psycopg.connect(url) as conn:
        return conn.execute(sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)), name)).fetchall()


def primary_key(url: str, table: str) -> set[str]:
    with psycopg.connect(url) as conn:
        found = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary", (sql.Identifier(table).as_string(conn),)).fetchall()
    return {name for (name,) in found}


def proxied(url: str, proxy: TcpProxy) -> str:
    return url.replace(f":{servers.POSTGRES.port}/", f":{proxy.port}/")


def drop_last_commit(checkpoint) -> int:
    """Forget that the query's last batch committed (and any batch begun after it): the next start runs it again."""
    commits, offsets = checkpoint / "commits", checkpoint / "offsets"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for log, first in ((commits, last), (offsets, last + 1)):
        for p in list(log.iterdir()):
            number = p.name.removeprefix(".").removesuffix(".crc")
            if number.isdigit() and int(number) >= first:
                p.unlink()
    return last


def test_fleet_run_restarted_with_a_replayed_batch_equals_the_batch_result(spark, postgres_url, tmp_path):
    s = settings(tmp_path, {"windows": f"{postgres_url}?table=w", "dead-letters": postgres_url},
                 output_mode={"windows": "update"})
    first = Run(spark, plan_run(s))
    first.start()
    wait_for_batch(first.queries[0], 1)
    first.stop_requested.set()
    first.wait()
    replayed = {name: drop_last_commit(tmp_path / "state" / "checkpoints" / name) for name in ("windows", "dead-letters")}

    second = Run(spark, plan_run(s))
    second.start_and_wait()
    for qp in second.plan.queries:  # the restart began by running the uncommitted batch again
        if qp.output.name in replayed:
            assert second.tracker.get(qp.name).history[0]["batchId"] == replayed[qp.output.name]

    assert primary_key(postgres_url, "w") == {"window_start", "window_end", "vehicle_id"}
    assert primary_key(postgres_url, "dead_letters") == {"offset"}
    for output, table in (("windows", "w"), ("dead-letters", "dead_letters")):
        expected = batch_output(spark, unmoded(s), output)  # update mode: every window with its final value
        got = as_frame(spark, rows(postgres_url, table, expected.columns), expected)
        assert got.count() > (100 if output == "windows" else 0)
        assertDataFrameEqual(got, expected, rtol=1e-9)


def test_a_server_lost_mid_run_is_waited_for_and_nothing_is_lost(spark, postgres_url, tmp_path):
    with TcpProxy((servers.POSTGRES.host, servers.POSTGRES.port)) as proxy:
        s = settings(tmp_path, {"windows": proxied(postgres_url, proxy) + "?table=w&retry_for=60s"},
                     output_mode={"windows": "update"})
        r = Run(spark, plan_run(s))
        r.start()
        wait_for_batch(r.queries[0], 0)
        proxy.down()  # refuses new connections and cuts open ones; batch 1 starts right away
        proxy.up_after(3.0).join()
        r.wait()
    history = r.tracker.get(r.plan.queries[0].name).history
    assert max(p["durationMs"]["addBatch"] for p in history if p["batchId"] > 0) >= 2000  # a batch waited it out
    expected = batch_output(spark, unmoded(s), "windows")
    assertDataFrameEqual(as_frame(spark, rows(postgres_url, "w", expected.columns), expected), expected, rtol=1e-9)


def test_update_mode_overwrites_a_window_and_a_replay_changes_nothing(spark, postgres_url):
    sink = open_sink(f"{postgres_url}?table=w")
    write = sink.batch_function(WINDOWS_SCHEMA, target("windows", "update"))
    write(windows_frame(spark, [window(0, "V1", 3, 50.0), window(0, "V2", 1, 20.0)]), 0)
    later = windows_frame(spark, [window(0, "V1", 5, 55.0), window(10, "V1", 1, 40.0)])
    write(later, 1)
    write(later, 1)  # Spark replays batch 1 after a failure
    assert write.last_rows == 2
    got = sorted(rows(postgres_url, "w", ["vehicle_id", "events", "avg_speed_kmh"]))
    assert got == [("V1", 1, 40.0), ("V1", 5, 55.0), ("V2", 1, 20.0)]


def test_alerts_are_inserted_once_whatever_is_replayed(spark, postgres_url):
    write = open_sink(postgres_url).batch_function(ALERTS_SCHEMA, target("alerts"))
    write(alerts_frame(spark, 300), 0)
    write(alerts_frame(spark, 300), 0)
    write(alerts_frame(spark, 200, first=250), 1)  # overlaps the first batch by 50 rows
    got = rows(postgres_url, "alerts", ["event_id", "zone_name"])
    assert len(got) == 450 == len({r[0] for r in got})
    assert got[0][1] == 'Mitte, "Unter den Linden"'


def test_awkward_table_and_schema_names_are_quoted(spark, postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "Fleet Ops"')
    name = 'we"ird; DROP TABLE x; --%s'
    sink = open_sink(f"{postgres_url}?table=Fleet Ops.{name.replace(';', '%3B').replace('%s', '%25s')}")
    assert sink.table_for("alerts") == ("Fleet Ops", name)
    write = sink.batch_function(ALERTS_SCHEMA, target("alerts"))
    write(alerts_frame(spark, 5), 0)
    assert len(rows(postgres_url, name, ["event_id"], schema="Fleet Ops")) == 5


def test_an_existing_table_of_another_shape_is_refused_naming_the_column(spark, postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE alerts (event_id text PRIMARY KEY, vehicle_id text, event_time timestamptz, "
                     "speed_kmh text, zone_name text)")
        conn.execute("CREATE TABLE nokey (event_id text, vehicle_id text, event_time timestamptz, "
                     "speed_kmh double precision, zone_name text)")
    with pytest.raises(SinkError, match=r"column 'speed_kmh' is text, but output 'alerts' writes double") as err:
        open_sink(postgres_url).batch_function(ALERTS_SCHEMA, target("alerts"))
    assert "\n" not in str(err.value)
    with pytest.raises(SinkError, match=r"no primary key or unique index on \(event_id\)"):
        open_sink(f"{postgres_url}?table=nokey").batch_function(ALERTS_SCHEMA, target("alerts"))


def test_unreachable_server_fails_check_in_one_line_without_the_password():
    port = servers.free_port()
    sink = open_sink(f"postgresql://app:hunter2@127.0.0.1:{port}/fleet?table=w")
    assert "hunter2" not in sink.describe() and "app:***@" in sink.describe()
    with pytest.raises(SinkError) as err:
        sink.check("windows", True)
    message = str(err.value)
    assert message.startswith(f"cannot reach PostgreSQL at 127.0.0.1:{port}/fleet: ")
    assert message.endswith("start the server or fix the URI")
    assert "hunter2" not in message and "\n" not in message


def test_a_batch_waits_for_a_server_that_comes_back(spark, postgres_url):
    with TcpProxy((servers.POSTGRES.host, servers.POSTGRES.port)) as proxy:
        write = open_sink(proxied(postgres_url, proxy)).batch_function(ALERTS_SCHEMA, target("alerts"))
        proxy.down()
        proxy.up_after(2.0)
        started = time.monotonic()
        write(alerts_frame(spark, 100), 0)
        assert time.monotonic() - started >= 2.0
    assert len(rows(postgres_url, "alerts", ["event_id"])) == 100


def test_a_batch_gives_up_after_retry_for_with_a_clear_message(spark, postgres_url):
    with TcpProxy((servers.POSTGRES.host, servers.POSTGRES.port)) as proxy:
        url = proxied(postgres_url, proxy).replace("postgresql://postgres@", "postgresql://postgres:hunter2@")
        write = open_sink(f"{url}?retry_for=1s").batch_function(ALERTS_SCHEMA, target("alerts"))
        proxy.down()
        with pytest.raises(SinkError) as err:
            write(alerts_frame(spark, 10), 0)
    message = str(err.value)
    assert message.startswith(f"lost PostgreSQL at 127.0.0.1:{proxy.port}/") and "retry_for=1s" in message
    assert "hunter2" not in message and "\n" not in message


def test_options_and_missing_driver_are_config_errors(monkeypatch, postgres_url):
    with pytest.raises(ConfigError, match="known options: retry_for, table"):
        open_sink(f"{postgres_url}?tabel=w")
    with pytest.raises(ConfigError, match="names no database"):
        open_sink("postgres://app@localhost:5432/")
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigError, match=r"pip install 'speedlayer\[postgres\]'"):
        open_sink(postgres_url)



def test_a_database_the_server_lacks_is_named_with_the_command_that_creates_it(postgres_url):
    missing = postgres_url.rsplit("/", 1)[0] + "/no_such_db_here?table=t"
    with pytest.raises(SinkError) as refused:
        open_sink(missing).check("alerts", fresh_checkpoint=True)
    message = str(refused.value)
    assert "has no database 'no_such_db_here': create it (createdb -h 127.0.0.1 -p " in message, message
    assert "start the server" not in message and "\n" not in message


def test_a_new_run_appending_into_a_table_of_another_run_is_refused(spark, postgres_url):
    first = open_sink(postgres_url)
    first.check("alerts", fresh_checkpoint=True)
    first.batch_function(ALERTS_SCHEMA, target("alerts", fresh=True))(alerts_frame(spark, 3), 0)
    again = open_sink(postgres_url)  # its check() not called: the guard holds whatever the order of calls
    with pytest.raises(SinkError, match='table "alerts" already holds rows of another run'):
        again.batch_function(ALERTS_SCHEMA, target("alerts", fresh=True))
    again.batch_function(ALERTS_SCHEMA, target("alerts", "update", fresh=True))  # upserts: the new run's rows win
    resumed = open_sink(postgres_url)
    resumed.check("alerts", fresh_checkpoint=False)
    resumed.batch_function(ALERTS_SCHEMA, target("alerts"))
