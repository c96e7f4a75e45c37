"""speedlayer: real-time stream processing on Spark Structured Streaming.

Sources turn an ingestion system into a raw stream, decoding validates it against an event schema,
a pipeline (a pure DataFrame function) computes named outputs, sinks deliver them, and the runner
wires it all. The built-in jobs use nothing but this public API; yours can do all they do::

    import speedlayer
    from speedlayer import APPEND, DEAD_LETTERS, EventSchema, Field, Job, Output

    ORDER = EventSchema("shop order", (Field("order_id", "string"), Field("customer", "string"),
                                       Field("amount", "double", min=0), Field("order_time", "timestamp")),
                        time_field="order_time")

    def big_orders(orders, params):
        return {"big": orders.where("amount >= 100").drop("ingest_time")}

    BIG_ORDERS = Job(name="big-orders", summary="orders of 100 or more", schema=ORDER, pipeline=big_orders,
                     outputs={"big": Output("big", "orders of 100 or more", (APPEND,), APPEND, stateful=False,
                                            key=("order_id",)),
                              "dead-letters": DEAD_LETTERS})

    with speedlayer.run(BIG_ORDERS, source="files:///landing/orders?format=json",
                        sinks={"big": "parquet:out/big"}, trigger="available-now") as handle:
        print(handle.wait())

Register a job for ``speedlayer run NAME`` with an entry point (group ``speedlayer.jobs``), or run
it as ``speedlayer run my_package.jobs:BIG_ORDERS``; docs/extending.md tells it all. The names
below are imported on first use, so ``import speedlayer`` does not start or import Spark.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: public name -> the module that defines it (imported on first use: PEP 562)
_EXPORTS = {
    # a job: its spec, outputs, settings and the output modes
    "Job": "speedlayer.pipelines.base",
    "Output": "speedlayer.pipelines.base",
    "Params": "speedlayer.pipelines.base",
    "DEAD_LETTERS": "speedlayer.pipelines.base",
    "LATE": "speedlayer.pipelines.base",
    "LazyOutputs": "speedlayer.pipelines.base",
    "Trainer": "speedlayer.pipelines.base",  # a model the job fits before it runs: speedlayer train JOB
    "Positions": "speedlayer.pipelines.base",  # the entities the dashboard's map shows
    "APPEND": "speedlayer.core.modes",
    "UPDATE": "speedlayer.core.modes",
    "COMPLETE": "speedlayer.core.modes",
    # what every job may use in its pipeline: the watermark, dedup, the late events, window columns
    "with_watermark": "speedlayer.pipelines.ops",
    "flatten_window": "speedlayer.pipelines.ops",
    "drop_duplicates": "speedlayer.pipelines.dedup",
    "late_events": "speedlayer.pipelines.late",
    "reference_table": "speedlayer.pipelines.tables",  # the static side of a stream-static join
    "shared_dir": "speedlayer.pipelines.tables",  # where a cluster must see it (Job.shared_paths)
    "TableRef": "speedlayer.core.tables",  # a table in files: a job's static input (Job.tables), a sink's rows
    # events
    "EventSchema": "speedlayer.core.schemas",
    "Field": "speedlayer.core.schemas",
    "RAW_SCHEMA": "speedlayer.core.schemas",
    "Decoded": "speedlayer.decode.validate",  # what a job's own decoder returns: events and dead letters
    "observed_decode": "speedlayer.decode.observation",  # a decoder of yours counts both sides per batch
    "VEHICLE_EVENT": "speedlayer.pipelines.fleet.schemas",  # the fleet's pings, for jobs of your own over them
    # sources and sinks
    "Source": "speedlayer.sources.base",
    "Sink": "speedlayer.sinks.base",
    "Target": "speedlayer.sinks.base",
    "EXACTLY_ONCE": "speedlayer.sinks.base",
    "AT_LEAST_ONCE": "speedlayer.sinks.base",
    "Uri": "speedlayer.core.uris",
    "parse_options": "speedlayer.core.uris",
    "parse_uri": "speedlayer.core.uris",
    "GeneratorOptions": "speedlayer.sources.generator_kit",  # what a generator kind of yours reads
    # running from Python
    "run": "speedlayer.runtime.handle",
    "RunHandle": "speedlayer.runtime.handle",
    "QueryStatus": "speedlayer.runtime.handle",
    "RunSummary": "speedlayer.runtime.summary",
    "RunSettings": "speedlayer.runtime.settings",  # a run's settings, as a config file names them
    "plan_run": "speedlayer.runtime.plan",  # a run planned and checked, without Spark (sinks= takes Sink objects)
    "Run": "speedlayer.runtime.run",  # the runner: prepare, start, wait, clean up
    # errors
    "SpeedlayerError": "speedlayer.core.errors",
    "ConfigError": "speedlayer.core.errors",
    "SourceError": "speedlayer.core.errors",
    "SinkError": "speedlayer.core.errors",
    "QueryFailedError": "speedlayer.core.errors",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'speedlayer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
