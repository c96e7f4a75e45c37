"""A write refused for lack of space is told in one line naming the full directory (see tests/e2e/test_disk_full.py)."""

from pathlib import Path

from speedlayer.runtime import checkpoints
from speedlayer.runtime.checkpoints import disk_full
from speedlayer.runtime.stopping import first_line

CHECKPOINT, OUTPUT = Path("/state/checkpoints/windows"), Path("/data/out")


def test_the_full_one_of_the_places_a_query_writes_is_named(monkeypatch):
    monkeypatch.setattr(checkpoints, "_free_bytes", lambda p: 4096 if p == OUTPUT else 10 << 30)
    line = first_line(RuntimeError("Job aborted\n Caused by: java.io.IOException: No space left on device\n at ..."),
                      [CHECKPOINT, OUTPUT])
    assert line.startswith(f"the disk under {OUTPUT} is full (No space left on device): free space there")


def test_python_errno_28_is_recognised_and_every_place_named_when_none_looks_full(monkeypatch):
    monkeypatch.setattr(checkpoints, "_free_bytes", lambda p: 10 << 30)  # space freed since the failure
    line = disk_full(str(OSError(28, "No space left on device")), [CHECKPOINT, OUTPUT])
    assert f"the disk under {CHECKPOINT} or {OUTPUT} is full" in line and "run the same command again" in line


def test_other_errors_are_left_alone():
    assert disk_full("java.io.IOException: Permission denied", [CHECKPOINT]) is None
    assert first_line(RuntimeError("boom\n at Spark")) == "boom"


class Captured(Exception):
    """The shape of PySpark's captured errors: a message, and the Java cause chain kept aside."""

    def __init__(self, desc: str, cause: "Captured | None" = None, trace: str = ""):
        super().__init__(desc)
        self.desc, self._desc, self._cause, self._stackTrace = desc, desc, cause, trace


def test_a_full_disk_found_deep_in_the_cause_chain_is_told(monkeypatch):
    monkeypatch.setattr(checkpoints, "_free_bytes", lambda p: 0)
    root = Captured("org.apache.hadoop.fs.FSError: java.io.IOException: x",
                    trace="...\nCaused by: java.io.IOException: No space left on device\n\tat ...")
    error = Captured("[CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT] Error writing state store files", Captured("wrapper", root))
    assert first_line(error, [CHECKPOINT]).startswith(f"the disk under {CHECKPOINT} is full")
    assert first_line(Captured("[CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT] x", Captured("Permission denied"))).startswith("[CANNOT")
