"""shopfeed://?per_batch=100 — synthetic shop orders on Spark's Python Data Source API.

Order n is a pure function of n, and an offset is the number of the next order: a batch replayed
after a failure reads the same offsets from the checkpoint, so it yields the very same rows.
"""

import json
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, Field
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from speedlayer import RAW_SCHEMA, Source, parse_options

FORMAT = "acme_shopfeed"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class ShopFeedOptions(BaseModel):
    per_batch: int = Field(100, gt=0, description="orders per micro-batch")
    every_ms: int = Field(1000, gt=0, description="order time between two orders")


class OrderRange(InputPartition):
    def __init__(self, first: int, end: int):
        self.first, self.end = first, end


class ShopFeedReader(DataSourceStreamReader):
    """Plans on the driver (offsets, partitions); ``read`` runs on the executors."""

    def __init__(self, options: dict):
        self.per_batch, self.every_ms = int(options["per_batch"]), int(options["every_ms"])

    def initialOffset(self) -> dict:
        return {"order": 0}

    def latestOffset(self, start: dict, limit) -> dict:
        return {"order": start["order"] + self.per_batch}  # a real system: its newest position

    def partitions(self, start: dict, end: dict) -> list:
        return [OrderRange(start["order"], end["order"])]

    def read(self, partition: OrderRange):
        for n in range(partition.first, partition.end):
            when = START + timedelta(milliseconds=n * self.every_ms)
            order = {"order_id": f"o{n}", "customer": f"c{n % 5}", "amount": (n * 37) % 200 + 0.5,
                     "currency": ("EUR", "USD", "GBP")[n % 3], "order_time": when.isoformat()}
            yield (json.dumps(order), f"c{n % 5}", str(n), when)  # RAW: value, key, offset, ingest_time

    def commit(self, end: dict) -> None:
        """Everything before ``end`` is processed for good: a real system acknowledges or trims it here."""


class ShopFeedDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        return RAW_SCHEMA

    def streamReader(self, schema):
        return ShopFeedReader(self.options)


class ShopFeedSource(Source):
    scheme = "shopfeed"
    summary = "synthetic shop orders, a pure function of their offset"  # speedlayer sources lists it
    supports_max_events = False  # --max-events is refused before start, with this fix:
    how_to_bound = "bound the run with --duration"

    def __init__(self, uri):
        super().__init__(uri)
        self.options = parse_options(ShopFeedOptions, uri.options, "shopfeed://")  # a bad option: one line

    def read_stream(self, spark, max_events=None):
        spark.dataSource.register(ShopFeedDataSource)
        return (spark.readStream.format(FORMAT).option("per_batch", self.options.per_batch)
                .option("every_ms", self.options.every_ms).load())
