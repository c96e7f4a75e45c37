"""The fraud job's events: card transactions, and the verdicts (labels) that reach the bank later.

>>> CARD_TRANSACTION.time_field, CARD_LABEL.time_field
('time', 'labelled_at')
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

CARD_LABEL = EventSchema(
    name="card transaction label",
    fields=(
        Field("tx_id", "string"),
        Field("is_fraud", "boolean"),
        Field("labelled_at", "timestamp"),
    ),
    time_field="labelled_at",
)
