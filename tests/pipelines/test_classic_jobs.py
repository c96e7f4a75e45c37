"""The classic jobs' plans, without Spark: per-job default sources and settings, job options, refusals."""

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.producers.produce import ProduceSettings, plan_produce
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings


def test_each_job_has_its_default_source_and_window_settings():
    wc = plan_run(RunSettings(job="wordcount"))
    assert wc.settings.source == "socket://localhost:9999" and [q.output.name for q in wc.queries] == ["totals"]
    assert (wc.params.sliding_window_ms, wc.params.slide_ms, wc.params.watermark_ms) == (30_000, 10_000, 10_000)
    assert wc.params.options.lowercase is True
    app = plan_run(RunSettings(job="app-actions"))
    assert app.source.options.kind == "actions" and app.queries[0].mode == "update"
    assert (app.params.sliding_window_ms, app.params.slide_ms, app.params.watermark_ms) == (3_600_000, 300_000, 600_000)
    fleet = plan_run(RunSettings(job="fleet"))
    assert fleet.settings.source == "generator://" and fleet.params.sliding_window_ms == 60_000


def test_what_the_user_gives_wins_over_the_job_defaults():
    plan = plan_run(RunSettings(job="app-actions", source="generator://?kind=actions&seed=3", slide="10min"))
    assert plan.source.options.seed == 3 and plan.params.slide_ms == 600_000 and plan.params.sliding_window_ms == 3_600_000
    wc = plan_run(RunSettings(job="wordcount", options={"lowercase": "false", "split": ","}))
    assert wc.params.options.lowercase is False and wc.params.options.split == ","


@pytest.mark.parametrize("settings,match", [
    (dict(job="wordcount", options={"stem": "yes"}), "job wordcount has no option 'stem'"),
    (dict(job="fleet", options={"lowercase": "true"}), "job fleet has no option 'lowercase'; known options: allowed_lateness"),
    (dict(job="app-actions", options={"lowercase": "true"}), r"job .app-actions. takes no options \(got lowercase\)"),
    (dict(job="wordcount", sinks={"batch-counts": "memory:b"}), "computed per micro-batch .* cannot take"),
    (dict(job="wordcount", sinks={"batch-counts": "console:"}, trigger="continuous:1s"), "per micro-batch"),
    (dict(job="wordcount", sinks={"totals": "console:"}, output_mode={"totals": "append"}), "fits complete, update"),
])
def test_impossible_runs_are_refused_in_one_line(settings, match):
    with pytest.raises(ConfigError, match=match) as err:
        plan_run(RunSettings(**settings))
    assert "\n" not in str(err.value)


def test_the_producer_publishes_every_kind():
    for kind in ("actions", "transactions"):
        plan = plan_produce(ProduceSettings(to="files:///tmp/landing", generator=f"generator://?kind={kind}", start="0"))
        assert f"kind={kind}" in plan.generator_uri()
