"""app-actions into MariaDB in update mode: SIGKILL mid-batch, restart, and no window is counted twice.

The source is the generator in unpaced mode (``rows_per_batch``): Spark's rate-micro-batch source
replays a batch's rows exactly, so with an idempotent sink the table after the crash and the
restart must equal the batch recomputation over the same events: every window's current count.
"""

from __future__ import annotations

import pytest
from pyspark.sql import DataFrame
from pyspark.testing import assertDataFrameEqual

from speedlayer.runtime.settings import RunSettings
from tests.e2e.killing import CliProcess, kill_mid_batch, mysql_rows
from tests.helpers import batch_output
from tests.sinks.common import as_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: 4 micro-batches of 300 actions, one per second of event time (20 min: 16 window starts x 8 actions)
N, PER_BATCH = 1200, 300
SOURCE = f"generator://?kind=actions&seed=5&start=2026-11-22T10:00:00Z&rate=1&rows_per_batch={PER_BATCH}"
KEY = ["window_start", "window_end", "action"]


def test_kill_and_restart_do_not_double_count(spark, mysql_url, tmp_path):
    state = tmp_path / "state"
    args = ["run", "app-actions", "--source", SOURCE, "--sink", f"counts={mysql_url}?table=action_counts",
            "--state-dir", str(state), "--max-events", str(N), "--no-live", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.sql.shuffle.partitions=2"]
    for attempt in range(3):
        kill = kill_mid_batch(CliProcess(args, tmp_path, tmp_path / f"run-{attempt}.log"), state, "counts", 0, 300)
        if kill is not None:
            break
    else:
        pytest.fail("three kills all landed between batches")
    final = CliProcess(args, tmp_path, tmp_path / "final.log")
    assert final.wait(300) == 0, final.tail()
    assert f"stopped by --max-events {N}" in final.output(), final.tail()

    expected = batch_output(spark, RunSettings(job="app-actions", source=SOURCE, max_events=N,
                                               output_mode={"counts": "complete"}), "counts").cache()
    got = as_frame(spark, mysql_rows(mysql_url, "action_counts", expected.columns), expected)
    assert expected.count() > 100
    assert_exactly(got, expected, KEY)


def assert_exactly(got: DataFrame, expected: DataFrame, key: list[str]) -> None:
    """No row missing, none twice, every value as computed in batch."""
    assert got.count() == got.select(*key).distinct().count(), "a key was written twice"
    assertDataFrameEqual(got, expected, rtol=1e-9)
