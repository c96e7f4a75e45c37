"""Fault injection: a requested hold marks the moment, holds, and never hangs a run for good."""

import time

import pytest

from speedlayer.core import faults
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings


def test_a_hold_marks_the_moment_then_fails_the_batch_in_one_line_after_its_time(tmp_path, monkeypatch):
    monkeypatch.setenv(faults.ENV, "mid-write:3")
    monkeypatch.setenv(faults.DIR_ENV, str(tmp_path))
    monkeypatch.setenv(faults.HOLD_ENV, "0.5")
    faults.reached("mid-write", 2, "PostgreSQL")  # another batch: goes on at once
    assert list(tmp_path.iterdir()) == []
    started = time.monotonic()
    with pytest.raises(faults.FaultHeld, match="held at mid-write of batch 3 for 0.5s by SPEEDLAYER_FAULT=mid-write:3: "
                                               "unset SPEEDLAYER_FAULT"):
        faults.reached("mid-write", 3, "PostgreSQL at db:5432")
    assert time.monotonic() - started >= 0.5
    [marker] = tmp_path.iterdir()
    assert marker.name.startswith("mid-write-3-PostgreSQL_at_db_5432-")


def test_a_run_with_a_fault_requested_says_so_before_it_starts(monkeypatch):
    assert not any(faults.ENV in n for n in plan_run(RunSettings(job="fleet")).notes)
    monkeypatch.setenv(faults.ENV, "written:4")
    assert any(n.startswith("SPEEDLAYER_FAULT=written:4 is set") for n in plan_run(RunSettings(job="fleet")).notes)
