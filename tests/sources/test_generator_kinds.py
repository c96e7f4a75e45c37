"""A kind of generated event is a plug-in: a package registers its own as speedlayer registers
vehicles, actions, transactions and rides, written with the same kit, and every path that makes
generated events (the source, a second stream's default, ``speedlayer produce``) makes it."""

import json

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.producers.produce import ProduceSettings, plan_produce
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import open_source
from speedlayer.sources.generator_kinds import kinds
from tests.runtime.test_declared_capabilities import REFUNDS

KINDS = "speedlayer.generator_kinds"
#: a user's kind, written with the public kit alone: order n is a pure function of (seed, n, start)
ORDERS_KIND = """
from pydantic import Field
from pyspark.sql import functions as F

from speedlayer.sources.generator_kit import GeneratorOptions, iso_time, kind_options, metadata, timeline, uniform


class OrderOptions(GeneratorOptions):
    customers: int = Field(3, gt=0, description="customers who order")


@kind_options(OrderOptions)
def order_events(seq, opts, start_ms):
    df = timeline(seq, opts, start_ms)
    order = F.struct(F.format_string("o%d", "src").alias("order_id"),
                     F.round(uniform(opts.seed, F.col("src"), 1) * 100, 2).alias("amount"),
                     iso_time(F.col("event_ms")).alias("order_time"))
    customer = F.format_string("c%d", F.col("src") % opts.customers)
    return df.select(F.to_json(order).alias("value"), *metadata(opts, start_ms, customer))


def refund_events(seq, opts, start_ms):
    return order_events(seq, opts, start_ms)


refund_events.options = dict  # declared wrong: not a GeneratorOptions

NOT_A_KIND = 42
"""


@pytest.fixture
def orders_kind(installed):
    installed("acme-orders", {KINDS: {"orders": "acme_orders:order_events", "refunds": "acme_orders:order_events",
                                      "broken": "acme_orders:NOT_A_KIND", "wrong": "acme_orders:refund_events"}},
              {"acme_orders": ORDERS_KIND})


def test_a_registered_kind_is_generated_replayably(orders_kind, spark, capsys):
    source = open_source("generator://?kind=orders&seed=3&start=0&duplicates=0&malformed=0&rate=10")
    rows = source.read_batch(spark, 5).collect()
    assert [(r.offset, r.key, json.loads(r.value)["order_id"]) for r in rows] == [
        (str(n), f"c{n % 3}", f"o{n}") for n in range(5)]
    assert [r.ingest_time.timestamp() for r in rows] == [n / 10 for n in range(5)]
    assert sorted(r.value for r in source.read_batch(spark, 5).collect()) == sorted(r.value for r in rows)
    assert ("warning: generator kind plug-in 'broken' of package acme-orders (acme_orders:NOT_A_KIND) is 42, "
            "not a function kind(seq, opts, start_ms) returning RAW rows") in capsys.readouterr().err


def test_a_kind_takes_its_own_options_and_no_other_kind_does(orders_kind, spark):
    source = open_source("generator://?kind=orders&seed=3&start=0&duplicates=0&malformed=0&customers=2")
    assert [r.key for r in source.read_batch(spark, 4).collect()] == ["c0", "c1", "c0", "c1"]
    assert "customers=2" in source.describe() and "vehicles=40" in open_source("generator://?vehicles=40").describe()
    with pytest.raises(ConfigError, match=r"generator:// \(kind=actions\) has no option 'customers'; known options: "):
        open_source("generator://?kind=actions&customers=2")
    with pytest.raises(ConfigError, match=r"generator:// \(kind=orders\) has no option 'vehicles'"):
        open_source("generator://?kind=orders&vehicles=40")
    with pytest.raises(ConfigError, match=r"generator:// \(kind=transactions\) option 'fraud': .*less than or equal to 1"):
        open_source("generator://?kind=transactions&fraud=2")
    with pytest.raises(ConfigError, match=r"generator kind .*refund_events.* declares options <class 'dict'>, not a "
                                          r"subclass of GeneratorOptions: fix its package"):
        open_source("generator://?kind=wrong")


def test_a_generator_run_gives_a_second_stream_the_registered_kind_of_its_name(orders_kind, tmp_path):
    p = plan_run(RunSettings(job="refunds", source="generator://?kind=orders&seed=5&customers=7",
                             sinks={"refunded": "console:"}), job=REFUNDS)
    refunds = p.inputs["refunds"].options
    assert (refunds.kind, refunds.seed, refunds.customers) == ("refunds", 5, 7)
    # the main generator's options that the second stream's kind does not take stay behind
    p = plan_run(RunSettings(job="refunds", source="generator://?kind=transactions&seed=5&cards=9",
                             sinks={"refunded": "console:"}), job=REFUNDS)
    assert p.inputs["refunds"].options.seed == 5 and not hasattr(p.inputs["refunds"].options, "cards")


def test_produce_makes_a_registered_kind(orders_kind):
    assert plan_produce(ProduceSettings(to="files:///tmp/landing", kind="orders", max_events=10)).options.kind == "orders"


def test_an_unknown_kind_names_the_registered_ones(orders_kind):
    assert list(kinds()) == ["vehicles", "actions", "transactions", "rides", "labels", "orders", "refunds", "wrong"]
    with pytest.raises(ConfigError, match=r"unknown kind 'bikes': choose one of vehicles, actions, transactions, "
                                          r"rides, labels, orders, refunds, wrong") as err:
        open_source("generator://?kind=bikes")
    assert "\n" not in str(err.value)
    # a misspelt kind is named as such, not the options only the meant kind takes
    with pytest.raises(ConfigError, match=r"option 'kind': unknown kind 'label': choose one of"):
        open_source("generator://?kind=label&label_delay=20s")
