"""The orders job: big orders, totals per customer, revenue per window, and the orders that came too late."""

from pydantic import BaseModel
from pydantic import Field as Option
from pyspark.sql import functions as F

from speedlayer import (
    APPEND,
    COMPLETE,
    DEAD_LETTERS,
    LATE,
    UPDATE,
    EventSchema,
    Field,
    Job,
    LazyOutputs,
    Output,
    drop_duplicates,
    flatten_window,
    late_events,
    with_watermark,
)

ORDER = EventSchema(
    name="shop order",
    fields=(
        Field("order_id", "string"),
        Field("customer", "string"),
        Field("amount", "double", min=0, max=100_000),
        Field("currency", "string", choices=("EUR", "USD", "GBP")),
        Field("order_time", "timestamp"),          # ISO-8601 text or epoch milliseconds
    ),
    time_field="order_time",
)


class OrdersOptions(BaseModel):
    """speedlayer run orders --big 250"""

    big: float = Option(100.0, ge=0, description="an order of at least this amount is big")


def orders_pipeline(orders, params):
    """Decoded orders (the schema's fields, ingest_time, offset) -> each output, built when a query asks for it."""
    options = params.options or OrdersOptions()
    watermarked = with_watermark(orders, params, "order_time")  # --watermark behind the newest order seen
    once = drop_duplicates(watermarked, params, "order_id").drop("ingest_time")  # a re-sent order counts once
    window = F.window("order_time", f"{params.window_ms} milliseconds")
    return LazyOutputs({
        "big": lambda: once.where(F.col("amount") >= options.big),
        "totals": lambda: once.groupBy("customer", "currency").agg(F.count(F.lit(1)).alias("orders"),
                                                                  F.sum("amount").alias("amount")),
        "revenue": lambda: flatten_window(once.groupBy(window, "currency").agg(F.sum("amount").alias("amount"),
                                                                               F.count(F.lit(1)).alias("orders"))),
        "late": lambda: late_events(watermarked, ORDERS, params),  # behind the watermark: no window counts them
    })


ORDERS = Job(
    name="orders",
    summary="big shop orders, totals per customer, revenue per window, late orders",
    schema=ORDER,
    pipeline=orders_pipeline,
    outputs={
        "big": Output("big", "orders of at least --big", (APPEND,), APPEND, stateful=True, key=("order_id",)),
        "totals": Output("totals", "orders and amount per customer and currency", (COMPLETE, UPDATE), COMPLETE,
                         stateful=True, key=("customer", "currency")),
        "revenue": Output("revenue", "amount and orders per --window of order time and currency", (APPEND, UPDATE),
                          APPEND, stateful=True, key=("window_start", "window_end", "currency")),
        "dead-letters": DEAD_LETTERS,
        "late": LATE,
    },
    default_outputs=("big",),
    dedup_key="order_id",
    default_source="shopfeed://?per_batch=100",
    defaults={"window": "1min", "watermark": "10min"},
    options=OrdersOptions,
)
