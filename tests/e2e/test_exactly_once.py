"""Exactly once, end to end: Redis Streams -> fleet job -> PostgreSQL + MariaDB + Parquet, through real crashes.

``speedlayer produce`` fills two Redis stream shards with a known set of events. The fleet job runs
as a CLI process with the same command each time; it is killed with SIGKILL (its whole process
group: Python, the JVM, Spark's Python workers) while a batch is in flight — planned in the offset
log, not yet in the commit log, maybe partly written — and restarted. The last run is bounded by
``--max-events`` and ends by itself. What the sinks then hold must equal a batch recomputation over
the same events: every row there, none twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.testing import assertDataFrameEqual

from speedlayer.config import RunSettings
from tests.e2e.conftest import PER_TRIGGER, N
from tests.e2e.killing import CliProcess, Kill, batch_ids, kill_mid_batch, mysql_rows, postgres_rows
from tests.helpers import batch_output, closed_windows
from tests.sinks.common import as_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WINDOW_KEY = ["window_start", "window_end", "vehicle_id"]
KEYS = {"windows": WINDOW_KEY, "sliding": WINDOW_KEY, "alerts": ["event_id"], "dead-letters": ["offset"]}
#: generous bounds for a loaded 2-core machine (a run normally takes well under a minute)
KILL_WITHIN_S, FINAL_RUN_S = 300, 600
#: tries at one kill: a batch may commit in the milliseconds between seeing it in flight and the kill
KILL_TRIES = 3


def run_args(source: str, sinks: dict[str, str], state: Path) -> list[str]:
    args = ["run", "fleet", "--source", f"{source}&max_records_per_trigger={PER_TRIGGER}"]
    for output, uri in sinks.items():
        args += ["--sink", f"{output}={uri}"]
    # No Spark UI: nobody looks at it, and each run would start a web server and look for a free port.
    return args + ["--state-dir", str(state), "--trigger", "processing:0s", "--no-live", "--conf", "spark.ui.enabled=false"]


def crash_and_finish(args: list[str], workdir: Path, watch: str, kill_after: list[int]) -> list[Kill]:
    """Run, kill mid-batch once ``watch`` has committed each batch of ``kill_after``, restart; finish bounded.

    Every run is the same command; the last one adds ``--max-events N`` and must end by itself.
    """
    state, kills, runs, began = workdir / "state", [], 0, time.monotonic()
    for after in kill_after:
        for _ in range(KILL_TRIES):
            process = CliProcess(args, workdir, workdir / f"run-{runs}.log")
            runs += 1
            kill = kill_mid_batch(process, state, watch, after, KILL_WITHIN_S)
            if kill is not None:
                kills.append(kill)
                print(f"{time.monotonic() - began:.0f}s: {kill.describe()}")
                break
        else:
            pytest.fail(f"{KILL_TRIES} kills of {watch} after batch {after} all landed between batches")
    final = CliProcess(args + ["--max-events", str(N)], workdir, workdir / "final.log")
    assert final.wait(FINAL_RUN_S) == 0, final.tail()
    out = final.output()
    assert f"stopped by --max-events {N}" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    print(f"{time.monotonic() - began:.0f}s: the bounded run ended")
    return kills


def last_run(state: Path) -> dict[str, dict]:
    return {q["output"]: q for q in json.loads((state / "last-run.json").read_text())["queries"]}


def assert_checkpoints_complete(state: Path, outputs: list[str], kills: list[Kill]) -> None:
    """Every batch id committed once in a row, each killed batch among them, and exactly N entries read."""
    for output in outputs:
        checkpoint = state / "checkpoints" / output
        commits = batch_ids(checkpoint / "commits")
        assert commits == set(range(max(commits) + 1)), (output, sorted(commits))
        for kill in kills:
            if kill.after.get(output) and kill.after[output].in_flight is not None:
                assert kill.after[output].in_flight in commits
        lines = (checkpoint / "offsets" / str(max(batch_ids(checkpoint / "offsets")))).read_text().splitlines()
        end = json.loads(lines[2])  # v1, metadata, then the source's offset
        assert sum(entry["read"] for key, entry in end.items() if not key.startswith("_")) == N, (output, end)


def assert_exactly(got: DataFrame, expected: DataFrame, key: list[str]) -> None:
    """No row missing, none twice, every value as computed in batch."""
    assert got.count() == got.select(*key).distinct().count(), "a key was written twice"
    assertDataFrameEqual(got, expected, rtol=1e-9)


def expectations(spark, source: str, state: Path, outputs: list[str]) -> dict[str, DataFrame]:
    """The batch recomputation over the same events; windows as far as append mode has closed them."""
    settings = RunSettings(job="fleet", source=source, max_events=N)
    runs = last_run(state)
    expected = {}
    for output in outputs:
        frame = batch_output(spark, settings, output)
        if output in ("windows", "sliding"):
            frame = closed_windows(frame, runs[output]["watermark"])
        expected[output] = frame.cache()  # counted, then compared: read Redis and recompute once
    return expected


def test_postgres_mariadb_and_parquet_sinks_survive_sigkill_mid_batch_twice(spark, stream, postgres_url, mysql_url,
                                                                          tmp_path):
    # One run feeds all three kinds of exactly-once sink (one CLI run per kill is what this test costs).
    tables = {"windows": "windows", "dead-letters": "dead_letters"}
    sinks = {output: f"{postgres_url}?table={table}" for output, table in tables.items()}
    sinks["alerts"] = f"{mysql_url}?table=alerts"
    # The file sink has no key to hide a repeat behind: a batch written twice would show as duplicate rows.
    sinks["sliding"] = f"parquet:{tmp_path / 'out' / 'sliding'}"
    kills = crash_and_finish(run_args(stream, sinks, tmp_path / "state"), tmp_path, "windows", [1, 5])
    assert [k.batch for k in kills] == sorted(k.batch for k in kills) and kills[0].batch >= 2

    state = tmp_path / "state"
    assert_checkpoints_complete(state, list(sinks), kills)
    expected = expectations(spark, stream, state, list(sinks))
    assert expected["windows"].count() > 500 and expected["alerts"].count() > 100
    assert expected["dead-letters"].count() > 0 and expected["sliding"].count() > 500
    for output, table in tables.items():
        got = as_frame(spark, postgres_rows(postgres_url, table, expected[output].columns), expected[output])
        assert_exactly(got, expected[output], KEYS[output])
    got = as_frame(spark, mysql_rows(mysql_url, "alerts", expected["alerts"].columns), expected["alerts"])
    assert_exactly(got, expected["alerts"], KEYS["alerts"])
    got = spark.read.parquet(str(tmp_path / "out" / "sliding"))  # through _spark_metadata: committed files only
    assert_exactly(got, expected["sliding"], KEYS["sliding"])
