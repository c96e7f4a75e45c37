"""A job file output that cannot run is refused before any query starts: one line naming it, exit 2.

SQL errors (syntax, unknown column or function) and modes Spark refuses for the query (an
aggregation without an event-time window in append mode, complete mode without one) are found
on every output's analysed plan before the first query starts: no checkpoint is written.
"""

import re

import pytest

from speedlayer.cli.app import main
from tests.pipelines.job_file.orders import ORDERS_YAML

GOOD_REVENUE = "revenue=parquet:out/revenue"


def job_file(tmp_path, **sql):
    """The orders job file with some outputs' SQL (and modes) replaced."""
    text = ORDERS_YAML
    for output, (query, modes) in sql.items():
        name = output.replace("_", "-")
        text = re.sub(rf"(\n  {name}:\n)(.*?)(?=\n  [a-z-]+:\n|\Z)",
                      lambda m, q=query, ms=modes: f"{m.group(1)}    sql: {q}\n    modes: [{ms}]\n", text, flags=re.S)
    path = tmp_path / "orders.yaml"
    path.write_text(text)
    (tmp_path / "landing").mkdir(exist_ok=True)
    return path


def refused(capsys, tmp_path, path, *args, source=None, trigger="available-now"):
    argv = ["run", "--job-file", str(path), "--source", source or f"files:{tmp_path / 'landing'}", "--state-dir",
            str(tmp_path / "state"), "--trigger", trigger, "--master", "local[2]", "--no-live",
            "--conf", "spark.sql.shuffle.partitions=2", *args]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    captured = capsys.readouterr()
    assert exit_info.value.code == 2, captured.err
    assert "Traceback" not in captured.err + captured.out and "{" not in captured.err  # no JSON log record
    errors = [line for line in captured.err.splitlines() if line.strip() and not line.startswith(("starting Spark", "note:"))]
    assert len(errors) == 1 and errors[0].startswith("error: "), captured.err
    assert not (tmp_path / "state" / "checkpoints").exists(), "a query started"
    assert not (tmp_path / "out").exists()
    return errors[0]


@pytest.mark.parametrize("sql,reason", [
    ("SELEC order_id FROM events", "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'"),
    ("SELECT order_id, amout FROM events", "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or function "
                                           "parameter with name `amout` cannot be resolved"),
    ("SELECT order_id, double_it(amount) FROM events", "[UNRESOLVED_ROUTINE] Cannot resolve routine `double_it`"),
    ("DROP TABLE events", "its SQL is a statement (DropTable), not a query: write a SELECT over the view events"),
    ("SELECT 1 AS one", "its SQL does not read the view events: write it over FROM events"),
])
def test_an_sql_error_names_the_output_and_the_file(spark, capsys, tmp_path, sql, reason):
    path = job_file(tmp_path, big_orders=(sql, "append"))
    line = refused(capsys, tmp_path, path, "--sink", GOOD_REVENUE, "--sink", "big-orders=parquet:out/big")
    assert line.startswith("error: output 'big-orders': ") and reason in line
    assert line.endswith(f"in {path}")


def test_an_aggregation_without_an_event_time_window_is_refused_in_append_mode(spark, capsys, tmp_path):
    path = job_file(tmp_path, per_customer=("SELECT customer_id, count(*) AS n FROM events GROUP BY customer_id",
                                            "append, update"))
    line = refused(capsys, tmp_path, path, "--sink", GOOD_REVENUE, "--sink", "per-customer=console:")
    assert line == (
        "error: output 'per-customer' cannot run in append mode: [STREAMING_OUTPUT_MODE.UNSUPPORTED_OPERATION] "
        "Invalid streaming output mode: append. This output mode is not supported for streaming aggregations without "
        f"watermark on streaming DataFrames/DataSets. SQLSTATE: 42KDE: fix the SQL in {path}, "
        "or write it in update mode (--output-mode per-customer=update)")


def test_complete_mode_without_an_aggregation_is_refused(spark, capsys, tmp_path):
    path = job_file(tmp_path, big_orders=("SELECT * FROM events WHERE amount > 1000", "append, complete"))
    line = refused(capsys, tmp_path, path, "--sink", GOOD_REVENUE, "--sink", "big-orders=memory:jf_refused",
                   "--output-mode", "big-orders=complete")
    assert line.startswith("error: output 'big-orders' cannot run in complete mode: [STREAMING_OUTPUT_MODE.")
    assert "not supported for no streaming aggregations" in line
    assert line.endswith(f"fix the SQL in {path}, or write it in append mode (--output-mode big-orders=append)")


def test_a_mode_the_output_does_not_list_is_refused_before_spark(capsys, tmp_path):
    path = job_file(tmp_path)
    line = refused(capsys, tmp_path, path, "--sink", "big-orders=console:", "--output-mode", "big-orders=update")
    assert line == "error: output 'big-orders' cannot be written in update mode: it fits append"


SPEEDS = """\
name: speeds
schema:
  time_field: event_time
  fields:
    - {name: event_id, type: string}
    - {name: vehicle_id, type: string}
    - {name: event_time, type: timestamp}
    - {name: speed_kmh, type: double, min: 0, max: 400}
    - {name: lat, type: double}
    - {name: lon, type: double}
outputs:
  fast:
    sql: SELECT vehicle_id, speed_kmh FROM events WHERE speed_kmh > 100
  per-vehicle:
    sql: SELECT vehicle_id, count(*) AS n FROM events GROUP BY vehicle_id
    modes: [append, update, complete]
"""


def test_an_output_that_keeps_state_is_refused_in_continuous_mode_from_its_plan(spark, capsys, tmp_path):
    path = tmp_path / "speeds.yaml"
    path.write_text(SPEEDS)
    line = refused(capsys, tmp_path, path, "--sink", "fast=memory:jf_fast", "--sink", "per-vehicle=memory:jf_per_vehicle",
                   source="generator://?rate=100", trigger="continuous:1s")
    # continuous mode sets no watermark, and writes append only: Spark's first objection is the mode's
    assert line.startswith("error: output 'per-vehicle' cannot run in append mode: [STREAMING_OUTPUT_MODE.")
    assert line.endswith(f"fix the SQL in {path}, or use a micro-batch trigger such as processing:1s")
