"""What a built-in connector can do, a user's connector declares the same way: a default second
stream and a shared clock on the Source class, real-time output on the Sink class.

Each user's connector here is a module of a package "installed" for the test (``installed``),
registered by entry point as a user's package registers its own; nothing in speedlayer knows it.
"""

import dataclasses

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run_state import prepare_state
from speedlayer.runtime.settings import RunSettings
from tests.runtime.shop import ORDER, SHOP

#: a generator-like source: it makes any kind of event, keeps a clock, and a second stream of it follows that clock
TICKS = """
from speedlayer import Source


class TicksSource(Source):
    scheme = "ticks"

    def __init__(self, uri):
        super().__init__(uri)
        self.kind = uri.options.get("kind", "orders")
        self.start_ms = int(uri.options["start"]) if "start" in uri.options else None
        self.given = self.start_ms is not None

    def default_input(self, name):
        return f"ticks://?kind={name}"

    def pin(self, run_state):
        if self.start_ms is None:
            self.start_ms = int(run_state.get("start_ms", 1_000))
        run_state["start_ms"] = self.start_ms

    def pin_at_start(self, run_state):
        if self.given:
            return False
        self.start_ms = run_state["start_ms"] = 5_000
        return True

    def clock(self):
        return self.start_ms

    def follow_clock(self, clock_ms):
        if self.given:
            return False
        self.start_ms = clock_ms
        return True

    def read_stream(self, spark, max_events=None):
        raise NotImplementedError
"""

#: a sink of Spark's own JVM writer, which real-time mode can run
JVM_SINK = """
from speedlayer import AT_LEAST_ONCE, Sink


class NoopSink(Sink):
    scheme = "noop"
    guarantee = AT_LEAST_ONCE
    modes = ("append", "update")
    supports_realtime = True

    def start(self, writer, df, target):
        return writer.format("noop").start()
"""

#: a source real-time mode can read (Spark reads Kafka so; this one is only planned)
FAST = """
from speedlayer import Source


class FastSource(Source):
    scheme = "fast"
    supports_realtime = True

    def read_stream(self, spark, max_events=None):
        raise NotImplementedError
"""

#: the shop job with a second stream, ``refunds``, that one output joins
REFUNDS = dataclasses.replace(
    SHOP, name="refunds", inputs={"refunds": dataclasses.replace(ORDER, name="refund")},
    outputs={**SHOP.outputs, "refunded": dataclasses.replace(SHOP.outputs["orders"], name="refunded", inputs=("refunds",))})


@pytest.fixture
def ticks(installed):
    installed("acme-ticks", {"speedlayer.sources": {"ticks": "acme_ticks:TicksSource"}}, {"acme_ticks": TICKS})


def refunds_plan(tmp_path, source: str, **kwargs):
    settings = RunSettings(job="refunds", source=source, sinks={"refunded": "console:"},
                           state_dir=str(tmp_path / "st"), **kwargs)
    return plan_run(settings, job=REFUNDS)


def test_a_users_source_gives_a_second_stream_its_default_source(ticks, tmp_path):
    p = refunds_plan(tmp_path, "ticks://?kind=orders")
    assert type(p.inputs["refunds"]).__name__ == "TicksSource" and p.inputs["refunds"].kind == "refunds"
    assert p.inputs["refunds"].event_schema.name == "refund"


def test_a_second_stream_of_a_users_source_keeps_its_clock_across_the_start_and_restarts(ticks, tmp_path):
    first = refunds_plan(tmp_path, "ticks://")
    first_state = prepare_state(first)
    assert first.inputs["refunds"].start_ms == first.source.start_ms == 1_000
    first_state.pin_at_start()  # the main source chose its clock anew: the second stream follows
    assert first.inputs["refunds"].start_ms == first.source.start_ms == 5_000

    again = refunds_plan(tmp_path, "ticks://")
    prepare_state(again)
    assert again.inputs["refunds"].start_ms == again.source.start_ms == 5_000


def test_a_second_stream_given_its_own_clock_keeps_it(ticks, tmp_path):
    p = refunds_plan(tmp_path, "ticks://", inputs={"refunds": "ticks://?kind=refunds&start=42"})
    prepare_state(p).pin_at_start()
    assert (p.source.start_ms, p.inputs["refunds"].start_ms) == (5_000, 42)


def test_a_source_that_declares_no_default_second_stream_asks_for_one(tmp_path):
    with pytest.raises(ConfigError, match="output 'refunded' joins a second stream, refunds: give its source with "
                                          "--refunds URI") as err:
        refunds_plan(tmp_path, "files:///landing?format=json")
    assert "\n" not in str(err.value)


def test_a_generator_gives_no_default_second_stream_of_a_kind_it_does_not_make(tmp_path):
    with pytest.raises(ConfigError, match="joins a second stream, refunds: give its source with --refunds URI"):
        refunds_plan(tmp_path, "generator://?kind=actions")


def test_a_users_sink_that_declares_real_time_output_is_planned_in_real_time_mode(installed):
    installed("acme-noop", {"speedlayer.sinks": {"noop": "acme_noop:NoopSink"},
                            "speedlayer.sources": {"fast": "acme_fast:FastSource"}},
              {"acme_noop": JVM_SINK, "acme_fast": FAST})
    p = plan_run(RunSettings(job="shop", source="fast://", trigger="realtime:1min", sinks={"dead-letters": "noop:"}), job=SHOP)
    assert p.trigger.realtime and [(q.sink.scheme, q.mode) for q in p.queries] == [("noop", "update")]
    with pytest.raises(ConfigError, match="sink parquet: cannot take real-time output"):
        plan_run(RunSettings(job="shop", source="fast://", trigger="realtime:1min", sinks={"dead-letters": "parquet:o"}),
                 job=SHOP)
