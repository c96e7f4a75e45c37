"""A stream-static join: each shop order with its customer's tier, from a reference table.

    speedlayer run vip_orders:VIP --customers ref/customers.csv --source 'files:///landing/orders?format=json'
"""

from pathlib import Path

from pydantic import BaseModel
from pydantic import Field as Option
from pyspark.sql import functions as F

from speedlayer import (
    APPEND,
    UPDATE,
    EventSchema,
    Field,
    Job,
    LazyOutputs,
    Output,
    drop_duplicates,
    flatten_window,
    reference_table,
    shared_dir,
    with_watermark,
)

ORDER = EventSchema(
    name="shop order",
    fields=(Field("order_id", "string"), Field("customer", "string"), Field("amount", "double", min=0),
            Field("order_time", "timestamp")),
    time_field="order_time",
)


class VipOptions(BaseModel):
    customers: str = Option("customers.csv", description="the customers table: a CSV with columns customer, tier")


def vip_pipeline(orders, params):
    """Orders with their customer's tier ('none' for a customer the table lacks), and revenue per tier."""
    options = params.options or VipOptions()
    # read once, now: its rows are kept in the query plan, so every batch (and its replay) joins the same
    tiers = reference_table(orders.sparkSession, options.customers, schema="customer STRING, tier STRING")
    once = drop_duplicates(with_watermark(orders, params, "order_time"), params, "order_id").drop("ingest_time", "offset")
    # broadcast: each executor gets the whole small table, the stream is never shuffled for the join;
    # left: an order of a customer the table does not know is kept
    tiered = once.join(F.broadcast(tiers), "customer", "left").withColumn("tier", F.coalesce("tier", F.lit("none")))
    window = F.window("order_time", f"{params.window_ms} milliseconds")
    return LazyOutputs({
        "tiered": lambda: tiered,
        "tier-revenue": lambda: flatten_window(tiered.groupBy(window, "tier").agg(F.sum("amount").alias("amount"),
                                                                                  F.count(F.lit(1)).alias("orders"))),
    })


def customers_dir(params) -> dict[str, Path]:
    """On a cluster, the executors read the table: its directory is checked to be shared before start."""
    folder = shared_dir((params.options or VipOptions()).customers)
    return {"--customers": folder} if folder else {}


VIP = Job(
    name="vip-orders",
    summary="orders with their customer's tier, revenue per tier",
    schema=ORDER,
    pipeline=vip_pipeline,
    outputs={
        "tiered": Output("tiered", "each order with its customer's tier", (APPEND,), APPEND, stateful=True,
                         key=("order_id",)),
        "tier-revenue": Output("tier-revenue", "amount and orders per --window and tier", (APPEND, UPDATE), APPEND,
                               stateful=True, key=("window_start", "window_end", "tier")),
    },
    default_outputs=("tiered",),
    dedup_key="order_id",
    defaults={"window": "1min", "watermark": "10s"},
    options=VipOptions,
    shared_paths=customers_dir,
)
