"""A run's SQL views: read-only statements only; outputs, state and static tables that agree with the files
and with plain Python over the input."""

from __future__ import annotations

import csv
from datetime import datetime, timedelta

import pyarrow.parquet as pq
import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.monitor.sql_views import check_read_only, define_views, query
from speedlayer.pipelines.fleet.zones import zones_file
from tests.helpers import committed_parquet
from tests.testing.events import T0


@pytest.mark.parametrize("sql", [
    "SELECT * FROM windows", "select 1;", "WITH a AS (SELECT 1) SELECT * FROM a", "SHOW VIEWS", "DESCRIBE windows",
    "EXPLAIN SELECT 1", "SELECT 'drop table x' AS text", "SELECT `update` FROM t", "-- a note\nSELECT 1",
    "/* insert */ SELECT 1", "SELECT replace(vehicle_id, 'V', '') FROM windows",
])
def test_statements_that_only_read_pass(sql):
    assert check_read_only(sql) == sql.strip().rstrip(";")


@pytest.mark.parametrize("sql, word", [
    ("DROP TABLE windows", "DROP"), ("INSERT INTO windows SELECT * FROM windows", "INSERT"),
    ("WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a", "INSERT"), ("SET spark.sql.shuffle.partitions=1", "SET"),
    ("SELECT reflect('java.lang.System', 'exit', 0)", "REFLECT"), ("CACHE TABLE windows", "CACHE"),
    ("create or replace temp view x as select 1", "CREATE"), ("SELECT 1; DROP TABLE windows", None), ("  ;  ", None),
])
def test_anything_that_writes_drops_or_is_several_statements_is_refused_in_one_line(sql, word):
    with pytest.raises(ConfigError) as refused:
        check_read_only(sql)
    message = str(refused.value)
    assert "\n" not in message
    assert (f"{word} is refused" in message or message.lower().endswith(f"not {word.lower()}")) if word else (
        "one statement" in message or "no SQL" in message)


def test_views_agree_with_the_committed_files_and_plain_python(spark, finished_fleet_run):
    state_dir, out, pings = finished_fleet_run
    session = spark.newSession()  # its own temporary views
    views = {v.name for v in define_views(session, state_dir)}
    assert {"windows", "alerts", "zones", "alerts_state", "windows_state_aggregation", "windows_state_dedup"} <= views

    files = pq.ParquetDataset(committed_parquet(out / "windows")).read().to_pylist()
    answer = query(session, "SELECT count(*) AS n, sum(events) AS events FROM windows")
    assert answer.rows == [(len(files), sum(r["events"] for r in files))] and not answer.truncated

    # every 10 s window of every vehicle is either written (closed) or still in the aggregation's state
    distinct = {p["event_id"]: p for p in pings}.values()
    expected = {(p["vehicle_id"], (datetime.fromisoformat(p["event_time"].replace("Z", "+00:00")) - T0)
                 // timedelta(seconds=10)) for p in distinct}
    written = query(session, "SELECT vehicle_id, window_start FROM windows").rows
    kept = query(session, "SELECT key.vehicle_id, key.window.start FROM windows_state_aggregation").rows
    as_keys = lambda rows: {(v, (start - T0.replace(tzinfo=None)) // timedelta(seconds=10)) for v, start in rows}  # noqa: E731
    assert as_keys(written) | as_keys(kept) == expected and not as_keys(written) & as_keys(kept)
    assert query(session, "SELECT count(*) FROM windows_state_dedup").rows[0][0] <= len(distinct)
    # the aggregation's state holds a count and a sum per function: each is reachable by its own name
    fields = query(session, "SELECT value.* FROM windows_state_aggregation LIMIT 1").columns
    assert len(fields) == len(set(fields)) and {"count", "count_2", "sum", "sum_2", "max"} <= set(fields)

    with open(zones_file()) as file:
        zones = [(row["zone_id"], float(row["speed_limit_kmh"])) for row in csv.DictReader(file)]
    assert query(session, "SELECT zone_id, speed_limit_kmh FROM zones").rows == zones


def test_a_limit_cuts_the_rows_and_says_so(spark, finished_fleet_run):
    session = spark.newSession()
    define_views(session, finished_fleet_run[0])
    answer = query(session, "SELECT * FROM windows ORDER BY vehicle_id, window_start", limit=2)
    assert len(answer.rows) == 2 and answer.truncated and answer.columns[:2] == ["window_start", "window_end"]


def test_a_failing_query_is_one_line(spark, finished_fleet_run):
    session = spark.newSession()
    define_views(session, finished_fleet_run[0])
    with pytest.raises(ConfigError, match=r"^the query failed: \[TABLE_OR_VIEW_NOT_FOUND\][^\n]*SHOW VIEWS lists[^\n]*$"):
        query(session, "SELECT * FROM nowhere")
    for statement in ("SELECT * FROM dead-letters", "SELECT * FROM `dead-letters`"):
        with pytest.raises(ConfigError, match=r"^the query failed: there is no view dead-letters: a view is named "
                                              r"after its output with _ for -, dead_letters \(SHOW VIEWS lists[^\n]*$"):
            query(session, statement)


def test_a_directory_without_a_run_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="holds no run"):
        define_views(None, tmp_path)
    with pytest.raises(ConfigError, match="does not exist: give the --state-dir the run was started with"):
        define_views(None, tmp_path / "nowhere")
