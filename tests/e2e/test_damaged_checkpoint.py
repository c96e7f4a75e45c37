"""A damaged or lost checkpoint log is a named error in one line, never a silent start from scratch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from speedlayer.core.errors import ConfigError, QueryFailedError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings

SOURCE = "generator://?seed=7&late=0&rate=2000&rows_per_batch=2000"


def settings(root: Path, sink: str | None = None) -> RunSettings:
    return RunSettings(job="fleet", source=SOURCE, max_events=6000, state_dir=str(root / "state"),
                       sinks={"windows": sink or f"parquet:{root / 'out'}"})


@pytest.fixture(scope="module")
def finished(spark, tmp_path_factory) -> Path:
    """The state and output of one bounded run, copied by each test before it damages them."""
    root = tmp_path_factory.mktemp("finished")
    summary = Run(spark, plan_run(settings(root))).start_and_wait()
    assert summary.queries[0].batches >= 3
    return root


@pytest.fixture
def copy(finished, tmp_path) -> Path:
    for part in ("state", "out"):
        shutil.copytree(finished / part, tmp_path / part)
    return tmp_path


def log_file(root: Path, log: str) -> Path:
    folder = root / "state" / "checkpoints" / "windows" / log
    return folder / str(max(int(p.name) for p in folder.iterdir() if p.name.isdigit()))


#: why a file overwritten with garbage is damaged: its checksum file (``.N.crc``, written beside it) no longer
#: matches, or what Spark finds in it (which of the two Hadoop's reader meets first varies from run to run)
GARBAGE = ("its bytes do not match its checksum", "MALFORMED_LOG_FILE")


@pytest.mark.parametrize("log,content,keep_checksum,reasons", [
    ("offsets", "garbage\n", True, GARBAGE),
    ("commits", "garbage\n", True, GARBAGE),
    ("offsets", "garbage\n", False, ("MALFORMED_LOG_FILE",)),
    ("commits", "", False, ("Incomplete log file",)),
])
def test_a_damaged_log_file_fails_the_run_naming_the_file(spark, copy, log, content, keep_checksum, reasons):
    damaged = log_file(copy, log)
    damaged.write_text(content)
    if not keep_checksum:
        (damaged.parent / f".{damaged.name}.crc").unlink()
    with pytest.raises(QueryFailedError) as failure:
        Run(spark, plan_run(settings(copy))).start_and_wait()
    message = str(failure.value)
    assert f"checkpoint file {damaged} is damaged" in message and any(r in message for r in reasons), message
    assert "\n" not in message and "start over with a new --state-dir" in message


def test_a_lost_offset_log_is_refused_before_start_not_restarted_from_scratch(spark, copy):
    shutil.rmtree(copy / "state" / "checkpoints" / "windows" / "offsets")
    # a sink that would take a fresh start silently (the Parquet sink refuses it on its own)
    run = Run(spark, plan_run(settings(copy, "memory:damaged_offsets")))
    with pytest.raises(ConfigError, match=r"the checkpoint of windows .* has no offset log but still holds commits, state"):
        run.start()
    assert run.queries == []
