"""Resuming from a state directory: changed results refused, the manifest replaced atomically, one run at a time."""

import json
import os
import subprocess
import sys

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run_state import prepare_state
from speedlayer.runtime.settings import RunSettings

MANIFEST = "speedlayer-run.json"


def prepared(state, **kwargs):
    plan = plan_run(RunSettings(**{"job": "fleet", "source": "generator://?seed=3", "state_dir": str(state), **kwargs}))
    prepare_state(plan)
    return plan


def with_progress(state):
    """As if a query of the earlier run had planned its first batch."""
    (state / "checkpoints" / "windows" / "offsets").mkdir(parents=True)
    (state / "checkpoints" / "windows" / "offsets" / "0").write_text("v1\n")
    return state


def test_a_resume_that_changes_the_window_is_refused_naming_old_and_new(tmp_path):
    state = tmp_path / "st"
    prepared(state)
    with_progress(state)
    with pytest.raises(ConfigError) as refused:
        prepared(state, window="20s", watermark="10s")
    message = str(refused.value)
    assert "\n" not in message
    assert "watermark 5s → 10s, window 10s → 20s" in message
    assert "new --state-dir" in message and "--allow-changed-settings" in message
    assert json.loads((state / MANIFEST).read_text())["settings"]["window"] == "10s"


@pytest.mark.parametrize("changed", [{"source": "generator://?seed=4"}, {"zones": "my-zones.csv"},
                                     {"output_mode": {"windows": "update"}}, {"trip_gap": "1min"}])
def test_every_result_changing_setting_is_refused_on_resume(tmp_path, changed):
    state = with_progress(tmp_path / "st")
    prepared(state)
    name = next(iter(changed))
    with pytest.raises(ConfigError, match=f"other settings \\({name} "):
        prepared(state, **changed)


def test_the_job_options_are_compared_too(tmp_path):
    state = with_progress(tmp_path / "st")
    prepared(state, job="wordcount", source="generator://?kind=vehicles")
    with pytest.raises(ConfigError, match=r"\(lowercase true → false\)"):
        prepared(state, job="wordcount", source="generator://?kind=vehicles", options={"lowercase": "false"})


def test_a_changed_resume_goes_on_when_the_user_says_so(tmp_path):
    state = tmp_path / "st"
    prepared(state)
    with_progress(state)
    plan = plan_run(RunSettings(job="fleet", source="generator://?seed=3", state_dir=str(state), window="20s",
                                allow_changed_settings=True))
    notes = prepare_state(plan).notes
    assert any("window 10s → 20s" in note and "--allow-changed-settings" in note for note in notes)
    assert json.loads((state / MANIFEST).read_text())["settings"]["window"] == "20s"


def test_settings_that_do_not_change_results_may_change(tmp_path):
    state = tmp_path / "st"
    prepared(state, max_events=100)
    with_progress(state)
    prepared(state, duration=5.0, trigger="processing:2s", conf={"spark.sql.shuffle.partitions": "3"},
             sinks={"windows": "memory:w", "alerts": "console:"}, master="local[1]")


def test_a_state_directory_without_progress_is_not_a_resume(tmp_path):
    state = tmp_path / "st"
    prepared(state)
    assert json.loads((state / MANIFEST).read_text())["settings"]["window"] == "10s"
    prepared(state, window="20s")  # the first run stopped before any batch: nothing to mix
    assert json.loads((state / MANIFEST).read_text())["settings"]["window"] == "20s"


def test_a_crash_between_writing_and_renaming_leaves_the_old_manifest(tmp_path, monkeypatch):
    state = tmp_path / "st"
    prepared(state, max_events=100)
    before = (state / MANIFEST).read_text()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("killed between the write and the rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        prepared(state, max_events=200)
    assert (state / MANIFEST).read_text() == before
    assert sorted(p.name for p in state.iterdir() if "speedlayer-run" in p.name) == [MANIFEST]


def test_a_state_directory_held_by_a_running_process_is_refused_at_once(tmp_path):
    from speedlayer.runtime.manifest import lock_state_dir

    state = tmp_path / "st"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pathlib import Path; from speedlayer.runtime.manifest import lock_state_dir; "
        f"lock = lock_state_dir(Path({str(state)!r})); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError) as refused:
            lock_state_dir(state)
        assert str(refused.value) == (f"state directory {state} is in use by another run (pid {holder.pid}): "
                                      "wait for it to stop, or give this run its own --state-dir")
    finally:
        holder.kill()
        holder.wait()
    lock_state_dir(state).release()  # free again once the holder is gone


def test_a_manifest_of_the_version_before_job_options_resumes_and_its_settings_still_count(tmp_path):
    """Before the fleet's settings were its options, a manifest kept them at its top level, with no
    ``job_options``: the same settings resume, a changed one is refused by its own name."""
    state = with_progress(tmp_path / "st")
    prepared(state, trip_gap="10min")
    manifest = json.loads((state / MANIFEST).read_text())
    legacy = {k: v for k, v in manifest["settings"].items() if k not in ("options", "inputs")}
    legacy.update(options={}, rides=None, zones=None, trip_gap="10min", max_trip="1h", count_window=20,
                  incident_after="10s", incident_timeout="30s", incident_updates=False, incident_initial_state=None,
                  allowed_lateness=None, match_within="10s", match_cell=500.0)
    (state / MANIFEST).write_text(json.dumps({"job": "fleet", "settings": legacy, "run_state": manifest["run_state"]}))
    prepared(state, trip_gap="10min")
    (state / MANIFEST).write_text(json.dumps({"job": "fleet", "settings": legacy, "run_state": manifest["run_state"]}))
    with pytest.raises(ConfigError, match=r"\(count_window 20 → 5\)"):
        prepared(state, trip_gap="10min", count_window=5)


def test_a_resume_after_the_job_file_changed_what_it_computes_is_refused(tmp_path):
    from tests.pipelines.job_file.orders import ORDERS_YAML

    state, job_file = tmp_path / "st", tmp_path / "orders.yaml"
    (tmp_path / "landing").mkdir()
    job_file.write_text(ORDERS_YAML)

    def prepared_job_file(path=job_file):
        plan = plan_run(RunSettings(job_file=str(path), source=f"files:{tmp_path / 'landing'}", state_dir=str(state)))
        prepare_state(plan)
        return plan

    first = prepared_job_file()
    recorded = json.loads((state / MANIFEST).read_text())
    assert recorded["job"] == "orders" and recorded["settings"]["job_definition"] == first.job.definition
    with_progress(state)
    job_file.write_text(ORDERS_YAML.replace("# a re-sent order counts once", "# comments may change"))
    moved = tmp_path / "moved.yaml"
    moved.write_text(job_file.read_text())
    prepared_job_file(moved)  # neither a comment nor where the file lies changes the results
    job_file.write_text(ORDERS_YAML.replace("amount > 1000", "amount > 5000"))
    with pytest.raises(ConfigError) as refused:
        prepared_job_file()
    message = str(refused.value)
    assert f"job_definition {first.job.definition} → sha256:" in message and "--allow-changed-settings" in message
    assert json.loads((state / MANIFEST).read_text())["settings"]["job_definition"] == first.job.definition


def test_a_state_dir_of_a_single_name_dedup_key_resumes_with_the_key_written_as_a_list(tmp_path):
    from tests.pipelines.job_file.orders import ORDERS_YAML

    state, job_file = tmp_path / "st", tmp_path / "orders.yaml"
    (tmp_path / "landing").mkdir()

    def prepared_job_file():
        plan = plan_run(RunSettings(job_file=str(job_file), source=f"files:{tmp_path / 'landing'}", state_dir=str(state)))
        prepare_state(plan)
        return plan

    job_file.write_text(ORDERS_YAML)
    prepared_job_file()
    manifest = json.loads((state / MANIFEST).read_text())
    manifest["settings"]["job_definition"] = "sha256:c31c96704ecf02a0"  # as the version with one-name keys recorded it
    (state / MANIFEST).write_text(json.dumps(manifest))
    with_progress(state)
    job_file.write_text(ORDERS_YAML.replace("dedup_key: order_id", "dedup_key: [order_id]"))
    assert prepared_job_file().job.dedup_key == "order_id"
    job_file.write_text(ORDERS_YAML.replace("dedup_key: order_id", "dedup_key: [order_id, customer_id]"))
    with pytest.raises(ConfigError, match="job_definition sha256:c31c96704ecf02a0 → sha256:"):
        prepared_job_file()
