"""``speedlayer status``: a checkpoint's committed batch, offsets and watermark; a non-checkpoint is one line."""

import pytest

from speedlayer.cli.app import main
from speedlayer.core.errors import ConfigError
from speedlayer.monitor.status import find_checkpoints
from speedlayer.runtime.shared import OUTPUTS_FILE, SHARED_CHECKPOINT


def write_checkpoint(folder, committed, planned):
    (folder / "offsets").mkdir(parents=True)
    (folder / "commits").mkdir()
    (folder / "metadata").write_text('{"id":"x"}')
    for batch in range(planned + 1):
        (folder / "offsets" / str(batch)).write_text(
            f'v1\n{{"batchWatermarkMs":{batch * 1000},"batchTimestampMs":1795354420000,"conf":{{}}}}\n{batch * 500}\n')
    for batch in range(committed + 1):
        (folder / "commits" / str(batch)).write_text(f'v1\n{{"nextBatchWatermarkMs":{batch * 1000 + 500}}}\n')


def test_reads_each_query_of_a_state_dir(tmp_path):
    write_checkpoint(tmp_path / "checkpoints" / "windows", committed=3, planned=4)
    write_checkpoint(tmp_path / "checkpoints" / "alerts", committed=2, planned=2)
    alerts, windows = find_checkpoints(tmp_path)
    assert (windows.name, windows.last_committed, windows.last_planned, windows.offsets) == ("windows", 3, 4, [1500])
    assert windows.watermark == "1970-01-01T00:00:03.500Z"
    assert (alerts.last_committed, alerts.offsets) == (2, [1000])


def test_the_shared_query_is_named_by_the_outputs_it_writes(tmp_path):
    shared = tmp_path / "checkpoints" / SHARED_CHECKPOINT
    write_checkpoint(shared, committed=1, planned=1)
    (shared / OUTPUTS_FILE).write_text('["alerts", "windows"]')
    write_checkpoint(tmp_path / "checkpoints" / "sliding", committed=0, planned=0)
    assert [c.name for c in find_checkpoints(tmp_path)] == ["shared: alerts, windows", "sliding"]


def test_cli_prints_the_table(tmp_path, capsys):
    write_checkpoint(tmp_path / "checkpoints" / "windows", committed=3, planned=4)
    main(["status", "--state-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "windows" in out and "batch 4 planned, not committed" in out and "1970-01-01T00:00:03.500Z" in out


def test_cli_prints_the_executors_the_run_recorded(tmp_path, capsys):
    from speedlayer.runtime.executors import ExecutorBook, ExecutorRecord, save_report

    write_checkpoint(tmp_path / "checkpoints" / "windows", committed=3, planned=3)
    main(["status", "--state-dir", str(tmp_path)])
    assert "executors" not in capsys.readouterr().out  # a run that recorded none (an older one)
    book = ExecutorBook(local=False, since_ms=0)
    book.update([ExecutorRecord("driver"), ExecutorRecord("0", "h0:1", cores=2), ExecutorRecord("1", "h1:1", cores=2)], 1_000)
    book.update([ExecutorRecord("driver"), ExecutorRecord("0", "h0:1", cores=2),
                 ExecutorRecord("1", "h1:1", False, 2, 1795354442114, "Worker lost")], 2_000)
    save_report(tmp_path, book.report, running=True)
    main(["status", "--state-dir", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == ["executors 1 (1 lost), 2 cores (since 1970-01-01T00:00:02.000Z)",
                          "  lost executor 1 on h1:1 at 2026-11-22T13:34:02.114Z: Worker lost"]


def test_not_a_checkpoint_is_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ConfigError, match="is not a checkpoint"):
        find_checkpoints(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["status", "--state-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and "is not a checkpoint" in err
