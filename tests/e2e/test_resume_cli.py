"""Resuming from the CLI: a changed resume is refused before Spark starts; one run per state directory."""

import os
import subprocess
import sys

SOURCE = "generator://?late=0&seed=7&rate=500&rows_per_batch=1000"


def run_args(*extra):
    return ("run", "fleet", "--source", SOURCE, "--state-dir", "st", "--no-live", "--sink", "windows=parquet:out/w", *extra)


def test_a_resume_with_another_window_is_refused_in_one_line_and_allowed_with_the_flag(run_cli, tmp_path):
    first = run_cli(*run_args("--max-events", "2000"))
    assert first.returncode == 0, first.stderr[-2000:]

    refused = run_cli(*run_args("--max-events", "3000", "--window", "20s"))
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [  # the one line: no "starting Spark" before it
        f"error: state directory {tmp_path / 'st'} holds a run with other settings (window 10s → 20s): its results "
        "would mix both; start over with a new --state-dir, or pass --allow-changed-settings to resume on purpose"]

    allowed = run_cli(*run_args("--max-events", "3000", "--window", "20s", "--allow-changed-settings"))
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "note: resuming" in allowed.stderr and "(window 10s → 20s)" in allowed.stderr


def test_a_second_run_on_a_state_directory_in_use_is_refused_at_once(run_cli, tmp_path):
    env = {**os.environ, "COLUMNS": "200"}
    holder = subprocess.Popen([sys.executable, "-m", "speedlayer", *run_args("--duration", "120")], cwd=tmp_path,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in holder.stderr:  # the holder has started Spark: it is past its own checks
            if line.startswith("starting Spark"):
                break
        second = run_cli(*run_args("--max-events", "1000"))
        assert second.returncode == 2, second.stderr[-2000:]
        assert second.stderr.strip().splitlines() == [  # the one line: refused before "starting Spark"
            f"error: state directory {tmp_path / 'st'} is in use by another run (pid {holder.pid}): wait for it to "
            "stop, or give this run its own --state-dir"]
    finally:
        holder.kill()
        holder.wait()
