"""``speedlayer sql`` on a stopped run: a table, CSV and JSON lines, a prompt; a session already running is not its own."""

import pyarrow.parquet as pq

from speedlayer.cli.app import main
from tests.helpers import committed_parquet


def test_the_command_prints_a_table_csv_json_and_answers_at_its_prompt(spark, finished_fleet_run, capsys, monkeypatch):
    state_dir = str(finished_fleet_run[0])
    main(["sql", "--state-dir", state_dir, "--format", "csv", "SELECT zone_id, speed_limit_kmh FROM zones LIMIT 2"])
    printed = capsys.readouterr()
    assert printed.out.splitlines() == ["zone_id,speed_limit_kmh", "Z01,30.0", "Z02,30.0"]
    assert printed.err.strip().splitlines()[-1] == "(2 rows)"

    main(["sql", "--state-dir", state_dir, "--format", "json", "--limit", "1", "SELECT zone_id FROM zones"])
    printed = capsys.readouterr()
    assert printed.out == '{"zone_id": "Z01"}\n' and "more left out: --limit 1" in printed.err

    typed = iter(["SELECT count(*)", "AS n FROM alerts;", "DROP TABLE alerts", "", "\\d", "\\q"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(typed))
    main(["sql", "--state-dir", state_dir])
    printed = capsys.readouterr()
    assert "error: speedlayer sql only reads: a statement starts with SELECT" in printed.err
    assert "windows_state_aggregation: state of query windows (aggregation)" in printed.out
    alerts = pq.ParquetDataset(committed_parquet(finished_fleet_run[1] / "alerts")).read().num_rows
    assert f"│ {alerts} " in printed.out
    assert not [t for t in spark.catalog.listTables() if t.name == "alerts"]  # the caller's session has no new views
