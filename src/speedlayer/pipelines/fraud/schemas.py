"""The fraud job's events: card transactions.

>>> CARD_TRANSACTION.time_field
'time'
"""

from __future__ import annotations

from speedlayer.core.schemas import EventSchema, Field

CARD_TRANSACTION = EventSchema(
    name="card transaction",
    fields=(
        Field("tx_id", "string"),
        Field("card_id", "string"),
        Field("time", "timestamp"),
        Field("amount", "double", 0, 1_000_000),
        Field("merchant_category", "string"),
        Field("country", "string"),
    ),
    time_field="time",
)
