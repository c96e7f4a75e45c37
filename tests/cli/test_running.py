"""The table a run ends with."""

from pathlib import Path

from rich.console import Console

from speedlayer.cli.running import summary_table
from speedlayer.runtime.summary import QuerySummary, RunSummary, committed_epochs


def _render(summary: RunSummary) -> str:
    console = Console(width=200, record=True)
    console.print(summary_table(summary))
    return console.export_text()


def test_a_continuous_query_shows_its_epochs_and_says_rows_are_not_counted(tmp_path):
    commits = tmp_path / "commits"
    commits.mkdir()
    for epoch in (0, 1, 2, 10, 11):  # the log keeps the latest epochs; the count is the last one's id + 1
        (commits / str(epoch)).write_text("v1\n{}")
    (commits / ".11.crc").write_text("")
    assert committed_epochs(tmp_path) == 12
    assert committed_epochs(tmp_path / "missing") == 0

    text = _render(RunSummary([QuerySummary("fleet_alerts", "alerts", "kafka", "at-least-once", "append", 12, None,
                                            None)], 30.2, Path("s"), "--duration 30s"))
    assert "not counted" in text and "batches are the epochs committed" in text


def test_a_micro_batch_query_shows_its_rows():
    text = _render(RunSummary([QuerySummary("fleet_alerts", "alerts", "kafka", "exactly-once", "append", 3, 12_345,
                                            None)], 5.0, Path("s"), "end of input"))
    assert "12,345" in text and "epochs" not in text
