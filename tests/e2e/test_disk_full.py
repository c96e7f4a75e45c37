"""Disk full under the checkpoint: the run stops in one line naming the directory, and resumes exactly.

A fleet run keeps its state directory on a small tmpfs mounted for the test and reads a landing
directory of JSON files written here (one file per micro-batch, on the ordinary disk, like its
Parquet output). Once batch 1 is committed, a filler file takes every free byte of the tmpfs, so
Spark can write no offset, commit or state file there. The run must stop with one line that says
the disk is full, names the directory and the fix; leave no log file half-written; and, once the
filler is gone, the same run restarted on the same state directory must end with exactly the
windows computed in plain Python (``tests.oracle``) from the lines of the files.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from speedlayer.core.errors import EnvironmentProblem, QueryFailedError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from tests import oracle
from tests.e2e.killing import batch_ids, query_state
from tests.helpers import land_files
from tests.servers import unavailable

pytestmark = pytest.mark.slow

FILES, PER_FILE, VEHICLES = 8, 300, 20
EVENTS_START = datetime(2026, 1, 5, 8, 0, 0)  # naive UTC, well before the files' modification time
FILE_SPAN = timedelta(seconds=30)
SMALL_FS = "8m"
#: how long a step of the run may take on a busy 2-core machine
STEP_S = 120


def events(seed: int = 5) -> list[list[str]]:
    """FILES files of PER_FILE JSON lines each: pings in time order, one re-sent copy and one bad line per file."""
    rng, files = random.Random(seed), []
    for k in range(FILES):
        lines = []
        for i in range(PER_FILE):
            when = EVENTS_START + k * FILE_SPAN + i * FILE_SPAN / PER_FILE
            lines.append(json.dumps({
                "event_id": f"e{k}-{i}", "vehicle_id": f"v{rng.randrange(VEHICLES):02d}",
                "event_time": when.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                "speed_kmh": round(rng.uniform(0, 140), 1),
                "lat": round(rng.uniform(52.40, 52.56), 5), "lon": round(rng.uniform(13.25, 13.50), 5)}))
        lines.append(lines[PER_FILE // 2])  # re-sent
        lines.append('{"event_id": "broken", "speed_kmh": ')  # a dead letter
        files.append(lines)
    return files


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of SMALL_FS mounted under ``tmp_path``, unmounted at teardown (even when the test fails)."""
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_FS},mode=0755", "tmpfs", str(mount)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs (root needed): {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # a JVM file still open


def fill(mount: Path) -> Path:
    """Write a file into ``mount`` until the filesystem refuses another byte; returns it."""
    filler = mount / "filler"
    with open(filler, "wb", buffering=0) as out:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError:
                pass
    return filler


def poll(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f}s")
        time.sleep(0.01)
    return value


def whole_logs(checkpoint: Path) -> list[str]:
    """Every offsets/commits file that Spark would read, checked whole: ``v1`` then JSON lines."""
    broken = []
    for log in ("offsets", "commits"):
        for path in (checkpoint / log).iterdir():
            if not path.name.isdigit():
                continue
            lines = path.read_text().splitlines()
            try:
                whole = lines[0] == "v1" and len(lines) >= 2 and all(json.loads(line) is not None for line in lines[1:])
            except (ValueError, IndexError):
                whole = False
            if not whole:
                broken.append(f"{log}/{path.name}")
    return broken


#: when the filler is written, as the checkpoint shows it: batch 1 committed and batch 2 not planned yet
#: (Spark's next write is offsets/2), or batch 2 planned and not committed (its state and commit to write)
MOMENTS = {"between-batches": lambda s: s.committed >= 1 and s.in_flight is None,
           "batch-in-flight": lambda s: s.committed >= 1 and s.in_flight is not None}


@pytest.mark.parametrize("moment", MOMENTS)
def test_disk_full_under_the_checkpoint_stops_in_one_line_and_resumes_exactly(spark, small_disk, tmp_path, moment):
    files = events()
    land_files(tmp_path / "landing", files, datetime.now(timezone.utc) - timedelta(minutes=5))
    state = small_disk / "state"
    settings = RunSettings(job="fleet", source=f"files://{tmp_path / 'landing'}?format=json&max_files_per_trigger=1",
                           trigger="available-now", state_dir=str(state), sinks={"windows": f"parquet:{tmp_path / 'out'}"})
    checkpoint = state / "checkpoints" / "windows"
    run = Run(spark, plan_run(settings))
    run.start()
    at_fill = poll(lambda: next((s for s in [query_state(checkpoint)] if MOMENTS[moment](s)), None), STEP_S, moment)
    filler = fill(small_disk)
    with pytest.raises(QueryFailedError) as failure:
        run.wait()
    message, after = str(failure.value), query_state(checkpoint)
    print(f"disk filled at {at_fill}; stopped at {after}: {message}")

    # the moment: nothing was planned once the disk was full, and the run stopped before the end of its input
    # (a batch in flight may still commit if its commit file's bytes were written just before the fill)
    assert after.planned == at_fill.planned and at_fill.committed <= after.committed < FILES - 1
    assert "\n" not in message and len(message) < 400, message
    assert "no space left" in message.lower() and str(state) in message and "free space" in message, message
    assert whole_logs(checkpoint) == []  # nothing half-written taken as a log entry

    filler.unlink()
    summary = Run(spark, plan_run(settings)).start_and_wait()
    commits = batch_ids(checkpoint / "commits")
    assert commits == set(range(max(commits) + 1)) and max(commits) >= FILES - 1, sorted(commits)
    check_windows(spark, tmp_path / "out", files, summary.queries[0].watermark)


def check_windows(spark, out: Path, files: list[list[str]], watermark: str) -> None:
    """The Parquet windows (committed files only, through ``_spark_metadata``) equal the plain-Python windows."""
    ingest = datetime.now()  # every event is hours before it: none is refused as far ahead
    pings = oracle.first_copies([p for lines in files for p in (oracle.parse(line, ingest) for line in lines) if p])
    closed_by = datetime.fromisoformat(watermark.replace("Z", "+00:00")).replace(tzinfo=None)
    expected = oracle.windows(pings, timedelta(seconds=10), closed_by)
    rows = [r.asDict() for r in spark.read.parquet(str(out)).collect()]
    got = {(r["window_start"], r["window_end"], r["vehicle_id"]): r for r in rows}
    assert len(rows) == len(got) == len(expected) > 200
    for key, want in expected.items():
        row = got[key]
        assert (row["events"], row["max_speed_kmh"], row["over_limit_events"]) == (
            want["events"], want["max_speed_kmh"], want["over_limit_events"]), key
        assert row["avg_speed_kmh"] == pytest.approx(want["avg_speed_kmh"], rel=1e-9), key


def test_a_state_dir_on_a_full_disk_is_refused_in_one_line_before_spark_starts(small_disk, tmp_path, run_cli):
    fill(small_disk)
    state = small_disk / "state"
    result = run_cli("run", "fleet", "--source", "generator://?rows_per_batch=100&seed=1", "--max-events", "300",
                     "--state-dir", str(state), "--sink", f"windows=parquet:{tmp_path / 'out'}", "--no-live", timeout=120)
    assert result.returncode == EnvironmentProblem.exit_code and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: the disk under {state} is full (No space left on device): free space there or move it to a larger disk, "
        "then run the same command again: it resumes from the last committed batch"], result.stderr
    # in this process: the same refusal, and no lock left behind once space is freed
    run = Run(None, plan_run(RunSettings(job="fleet", state_dir=str(state), sinks={"windows": "memory:full_disk"})))
    with pytest.raises(EnvironmentProblem, match="the disk under .* is full"):
        run.prepare()
    (small_disk / "filler").unlink()
    run.prepare()
    run.cleanup()
