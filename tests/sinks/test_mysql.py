"""The MySQL sink against a real MariaDB: keyed tables, upserts, replays, retries, masked secrets."""

from __future__ import annotations

import sys
import time
from contextlib import closing

import pymysql
import pytest
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.errors import ConfigError, SinkError
from speedlayer.sinks import open_sink
from tests import servers
from tests.helpers import batch_output, closed_windows
from tests.sinks.common import ALERTS_SCHEMA, WINDOWS_SCHEMA, alerts_frame, as_frame, run, settings, target, window, windows_frame
from tests.sinks.tcp_proxy import TcpProxy


def connect(url: str):
    database = url.rsplit("/", 1)[1].split("?")[0]
    return closing(pymysql.connect(host=servers.MARIADB.host, port=servers.MARIADB.port, user="root", password="",
                                   database=database, init_command="SET time_zone = '+00:00'"))


def query(url: str, statement: str, args=None) -> list[tuple]:
    with connect(url) as conn, conn.cursor() as cur:
        cur.execute(statement, args)
        conn.commit()
        return list(cur.fetchall())


def rows(url: str, table: str, columns: list[str]) -> list[tuple]:
    quoted = ", ".join("`" + c.replace("`", "``") + "`" for c in columns)
    return query(url, f"SELECT {quoted} FROM `{table.replace('`', '``')}`")


def primary_key(url: str, table: str) -> list[str]:
    found = query(url, "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
                       "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", (table,))
    return [name for (name,) in found]


def proxied(url: str, proxy: TcpProxy) -> str:
    return url.replace(f":{servers.MARIADB.port}/", f":{proxy.port}/")


def test_fleet_run_writes_closed_windows_and_alerts_once(spark, mysql_url, tmp_path):
    s = settings(tmp_path, {"windows": mysql_url, "alerts": f"{mysql_url}?table=speed_alerts"})
    summary = run(spark, s)
    assert primary_key(mysql_url, "windows") == ["window_start", "window_end", "vehicle_id"]
    assert primary_key(mysql_url, "speed_alerts") == ["event_id"]
    watermark = next(q.watermark for q in summary.queries if q.output == "windows")
    expected = closed_windows(batch_output(spark, s, "windows"), watermark)
    assert expected.count() > 100
    assertDataFrameEqual(as_frame(spark, rows(mysql_url, "windows", expected.columns), expected), expected, rtol=1e-9)
    alerts = batch_output(spark, s, "alerts")
    assertDataFrameEqual(as_frame(spark, rows(mysql_url, "speed_alerts", alerts.columns), alerts), alerts)


def test_update_mode_overwrites_a_window_and_a_replay_changes_nothing(spark, mysql_url):
    write = open_sink(mysql_url).batch_function(WINDOWS_SCHEMA, target("windows", "update"))
    write(windows_frame(spark, [window(0, "V1", 3, 50.0), window(0, "v1", 1, 20.0)]), 0)  # keys are case-sensitive
    later = windows_frame(spark, [window(0, "V1", 5, 55.0), window(10, "V1", 1, 40.0)])
    write(later, 1)
    write(later, 1)  # Spark replays batch 1 after a failure
    got = sorted(rows(mysql_url, "windows", ["vehicle_id", "events", "avg_speed_kmh", "window_start"]))
    assert [r[:3] for r in got] == [("V1", 1, 40.0), ("V1", 5, 55.0), ("v1", 1, 20.0)]
    assert str(got[1][3]) == "2026-11-22 10:00:00"  # UTC wall time


def test_alerts_are_inserted_once_whatever_is_replayed(spark, mysql_url):
    write = open_sink(mysql_url).batch_function(ALERTS_SCHEMA, target("alerts"))
    write(alerts_frame(spark, 300), 0)
    write(alerts_frame(spark, 300), 0)
    write(alerts_frame(spark, 200, first=250), 1)
    got = rows(mysql_url, "alerts", ["event_id", "zone_name"])
    assert len(got) == 450 == len({r[0] for r in got})
    assert got[0][1] == 'Mitte, "Unter den Linden"'


def test_awkward_table_names_are_quoted(spark, mysql_url):
    name = "we`ird'; DROP TABLE x; --%s"
    sink = open_sink(f"{mysql_url}?table={name.replace(';', '%3B').replace('%s', '%25s')}")
    assert sink.table_for("alerts") == (name,)
    sink.batch_function(ALERTS_SCHEMA, target("alerts"))(alerts_frame(spark, 5), 0)
    assert len(rows(mysql_url, name, ["event_id"])) == 5


def test_an_existing_table_of_another_shape_is_refused_naming_the_column(spark, mysql_url):
    query(mysql_url, "CREATE TABLE alerts (event_id VARCHAR(64) PRIMARY KEY, vehicle_id TEXT, event_time DATETIME, "
                     "speed_kmh TEXT, zone_name TEXT)")
    with pytest.raises(SinkError, match=r"column 'speed_kmh' is text, but output 'alerts' writes double") as err:
        open_sink(mysql_url).batch_function(ALERTS_SCHEMA, target("alerts"))
    assert "\n" not in str(err.value)
    query(mysql_url, "CREATE TABLE nokey (event_id VARCHAR(64), vehicle_id TEXT, event_time DATETIME(3), "
                     "speed_kmh DOUBLE, zone_name TEXT)")
    with pytest.raises(SinkError, match=r"no primary key or unique index on \(event_id\)"):
        open_sink(f"{mysql_url}?table=nokey").batch_function(ALERTS_SCHEMA, target("alerts"))


def test_unreachable_server_fails_check_in_one_line_without_the_password():
    port = servers.free_port()
    sink = open_sink(f"mysql://app:hunter2@127.0.0.1:{port}/fleet")
    assert "hunter2" not in sink.describe() and "app:***@" in sink.describe()
    with pytest.raises(SinkError) as err:
        sink.check("windows", True)
    message = str(err.value)
    assert message.startswith(f"cannot reach MySQL at 127.0.0.1:{port}/fleet: ") and "Connection refused" in message
    assert message.endswith("start the server or fix the URI")
    assert "hunter2" not in message and "\n" not in message


def test_a_batch_waits_for_a_server_that_comes_back_and_gives_up_after_retry_for(spark, mysql_url):
    with TcpProxy((servers.MARIADB.host, servers.MARIADB.port)) as proxy:
        url = proxied(mysql_url, proxy)
        write = open_sink(url).batch_function(ALERTS_SCHEMA, target("alerts"))
        proxy.down()
        proxy.up_after(2.0)
        started = time.monotonic()
        write(alerts_frame(spark, 100), 0)
        assert time.monotonic() - started >= 2.0

        impatient = open_sink(f"{url}?retry_for=1s").batch_function(ALERTS_SCHEMA, target("alerts"))
        proxy.down()
        with pytest.raises(SinkError) as err:
            impatient(alerts_frame(spark, 10, first=100), 1)
    assert str(err.value).startswith(f"lost MySQL at 127.0.0.1:{proxy.port}/")
    assert len(rows(mysql_url, "alerts", ["event_id"])) == 100


def test_options_and_missing_driver_are_config_errors(monkeypatch, mysql_url):
    with pytest.raises(ConfigError, match="invalid retry_for 'soon'"):
        open_sink(f"{mysql_url}?retry_for=soon")
    monkeypatch.setitem(sys.modules, "pymysql", None)
    with pytest.raises(ConfigError, match=r"pip install 'speedlayer\[mysql\]'"):
        open_sink(mysql_url)


def test_a_database_the_server_lacks_is_named_with_the_statement_that_creates_it(mysql_url):
    missing = mysql_url.rsplit("/", 1)[0] + "/no_such_db_here?table=t"
    with pytest.raises(SinkError) as refused:
        open_sink(missing).check("alerts", fresh_checkpoint=True)
    message = str(refused.value)
    assert "has no database 'no_such_db_here': create it (CREATE DATABASE `no_such_db_here`)" in message, message
    assert "start the server" not in message and "\n" not in message


def test_a_new_run_appending_into_a_table_of_another_run_is_refused(spark, mysql_url):
    first = open_sink(mysql_url)
    first.check("dead-letters", fresh_checkpoint=True)
    first.batch_function(ALERTS_SCHEMA, target("dead-letters", fresh=True))(alerts_frame(spark, 3), 0)
    again = open_sink(mysql_url)
    again.check("dead-letters", fresh_checkpoint=True)
    with pytest.raises(SinkError, match="table `dead_letters` already holds rows of another run"):
        again.batch_function(ALERTS_SCHEMA, target("dead-letters", fresh=True))
