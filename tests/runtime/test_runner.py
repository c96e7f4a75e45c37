"""The runner owns a run: an immutable plan, a state directory taken and given back by ``Run`` alone."""

from __future__ import annotations

import dataclasses
import json

import pytest

import speedlayer
from speedlayer.core.errors import ConfigError, QueryFailedError, SinkError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.testing import CollectSink

SOURCE = "generator://?seed=5&rows_per_batch=200&start=2026-01-01T00:00:00Z"


def test_a_sink_given_as_an_object_is_checked_like_one_given_by_uri():
    continuous = RunSettings(job="fleet", trigger="continuous:1s")
    with pytest.raises(ConfigError, match="sink collect: cannot take continuous output"):
        plan_run(continuous, sinks={"alerts": CollectSink()})
    with pytest.raises(ConfigError, match="job 'fleet' has no output 'nope'"):
        plan_run(RunSettings(job="fleet"), sinks={"nope": CollectSink()})
    plan = plan_run(RunSettings(job="fleet", sinks={"windows": "memory:w"}), sinks={"alerts": CollectSink()})
    assert [(q.output.name, q.sink.scheme) for q in plan.queries] == [("windows", "memory"), ("alerts", "collect")]


def test_a_plan_is_not_changed_by_running_it(spark, tmp_path):
    from tests.pipelines.job_file.orders import ORDERS_YAML

    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "orders.json").write_text(json.dumps(
        {"order_id": "o1", "customer_id": "c1", "amount": 2500.0, "currency": "EUR",
         "order_time": "2026-01-01T00:00:00Z"}) + "\n")
    job_file = tmp_path / "orders.yaml"
    job_file.write_text(ORDERS_YAML)
    settings = RunSettings(job_file=str(job_file), source=f"files://{tmp_path / 'landing'}?format=json",
                           state_dir=str(tmp_path / "st"), trigger="available-now",
                           sinks={"big-orders": "memory:big_orders"})
    plan = plan_run(settings)
    before = dict(vars(plan.queries[0]))
    assert plan.queries[0].name == "big_orders"  # the memory sink names its query, and says so when planned
    run = Run(spark, plan)
    summary = run.start_and_wait()
    assert summary.queries[0].name == "big_orders" and summary.queries[0].input_rows == 1
    assert vars(plan.queries[0]) == before and plan.queries[0].output.stateful is None
    assert run.outputs["big-orders"].stateful is True  # its dedup keeps state: learned from the query plan, the run's
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.queries[0].name = "renamed"


def test_a_refused_preparation_gives_the_state_directory_back(tmp_path):
    out = tmp_path / "windows"
    (out / "_spark_metadata").mkdir(parents=True)
    (out / "_spark_metadata" / "0").write_text("v1")  # another run's output: refused when the state is checked
    state = tmp_path / "st"
    refused = Run(None, plan_run(RunSettings(job="fleet", source=SOURCE, state_dir=str(state),
                                             sinks={"windows": f"parquet://{out}"})))
    with pytest.raises(SinkError, match="already holds the output of another run"):
        refused.prepare()
    taken = Run(None, plan_run(RunSettings(job="fleet", source=SOURCE, state_dir=str(state),
                                           sinks={"windows": "memory:w"})))
    taken.prepare()  # the lock was released: the next run takes it
    with pytest.raises(ConfigError, match="is in use by another run"):
        Run(None, plan_run(RunSettings(job="fleet", source=SOURCE, state_dir=str(state)))).prepare()
    taken.cleanup()
    assert state.is_dir()  # a state directory given is kept

    temporary = plan_run(RunSettings(job="fleet", source=SOURCE, sinks={"windows": f"parquet://{out}"}))
    assert temporary.temporary_state
    with pytest.raises(SinkError):
        Run(None, temporary).prepare()
    assert not temporary.state_dir.exists()  # a temporary one is removed


class RefusingSink(CollectSink):
    def start(self, writer, df, target):
        raise RuntimeError("no such format")


def test_a_query_that_cannot_start_ends_the_run_cleaned_up(spark):
    plan = plan_run(RunSettings(job="fleet", source=SOURCE), sinks={"alerts": RefusingSink()})
    assert plan.temporary_state
    with pytest.raises(QueryFailedError, match="could not start the fleet job: no such format"):
        Run(spark, plan).start()
    assert not plan.state_dir.exists()


def test_a_bounded_query_that_has_flushed_stops_while_a_slower_one_goes_on(spark, tmp_path):
    """500 events a batch, 1,500 in all: batch 2 reads the last, two more flush (FLUSH_BATCHES), one may be
    in flight when the stop comes, and the run polls every 0.2 s: at most 8 batches a query. The alerts
    query's batches take a fraction of the trips query's (a Python state processor): it used to run empty
    batches back to back until trips was done too."""
    settings = RunSettings(job="fleet", source="generator://?seed=5&rows_per_batch=500&late=0&start=2026-01-01T00:00:00Z",
                           max_events=1500, state_dir=str(tmp_path / "st"), trigger="processing:0s",
                           sinks={"alerts": "memory:", "trips": "memory:"})
    summary = Run(spark, plan_run(settings)).start_and_wait()
    batches = {q.output: q.batches for q in summary.queries}
    assert summary.stopped_by == "--max-events 1500" and all(4 <= b <= 8 for b in batches.values()), batches


def test_sinks_given_wrong_are_one_line_each():
    with pytest.raises(ConfigError, match=r"sinks=\{'alerts': ...\} takes a Sink object, not the class CollectSink: "
                                          r"give an instance"):
        plan_run(RunSettings(job="fleet"), sinks={"alerts": CollectSink})
    with pytest.raises(ConfigError, match=r"takes a Sink object, not str 'memory:a'"):
        plan_run(RunSettings(job="fleet"), sinks={"alerts": "memory:a"})
    with pytest.raises(ConfigError, match=r"sinks takes a dict of output name -> sink URI, e.g. .* not str 'windows=memory:x'"):
        speedlayer.run("fleet", sinks="windows=memory:x")
