"""``generator://?kind=labels`` — the bank's later verdict on each transaction: ``{tx_id, is_fraud, labelled_at}``.

A chargeback (fraud) or a confirmation (genuine) reaches the bank ``label_delay`` after the
payment. Label ``n`` is about transaction ``n - label_delay × rate`` (when that number was a new
payment, not a re-sent one) of the transactions kind with the same seed, rate, cards, fraud, drift
and duplicates, and carries its ground truth (``was_fraud``), so the two streams agree when they
share a start (the fraud job's ``--labels`` follows the transactions' clock). The first
``label_delay`` of the stream labels nothing: no payment was made before the start. A share
``unknown`` of labels names a transaction that never was; the generator's ``duplicates`` re-send a
label (in the place of another payment's, which then never comes: not every payment gets a
verdict), ``malformed`` corrupts one.

    generator://?kind=labels&rate=200&seed=7&label_delay=2min
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import parse_duration
from speedlayer.pipelines.fraud.transaction_kind import TransactionOptions, was_fraud
from speedlayer.sources.generator_kit import corrupt, iso_time, kind_options, metadata, resent, timeline, uniform

PAYLOAD_FIELDS = ("tx_id", "is_fraud", "labelled_at")


class LabelOptions(TransactionOptions):
    """``generator://?kind=labels``: the transactions' options (the labels tell their truth), the delay
    of a verdict and the share of labels naming no transaction."""

    label_delay: str = Field("2min", description="how long after the payment its verdict arrives")
    unknown: float = Field(0.0, ge=0, le=1, description="fraction of labels naming a transaction that never was")

    @field_validator("label_delay")
    @classmethod
    def _delay_is_a_duration(cls, value: str) -> str:
        parse_duration(value)
        return value

    def lag(self) -> int:
        """How many transactions a label trails its transaction by.

        >>> LabelOptions(kind="labels", rate=200, label_delay="2min").lag()
        24000
        """
        return parse_duration(self.label_delay) * self.rate // 1000


@kind_options(LabelOptions)
def label_events(seq: DataFrame, opts: LabelOptions, start_ms: int) -> DataFrame:
    """RAW rows of labels for a DataFrame of sequence numbers ``n``; key = the transaction.

    >>> label_events(spark.range(30000).withColumnRenamed("id", "n"), LabelOptions(kind="labels"), 0)  # doctest: +SKIP
    """
    c, seed = F.col, opts.seed
    tx = c("src") - opts.lag()
    # a label for each payment made since the start; a transaction number that re-sent an earlier one was none
    df = timeline(seq, opts, start_ms).where((tx >= 0) & ~resent(opts, tx))
    unknown = uniform(seed, c("src"), 20) < opts.unknown
    df = df.select("n", "src", F.when(unknown, F.format_string("t-unknown-%08d", tx))
                   .otherwise(F.format_string("t-%08d", tx)).alias("tx_id"),
                   was_fraud(opts, tx).alias("is_fraud"), iso_time(c("event_ms")).alias("labelled_at"))
    good = F.to_json(F.struct(*PAYLOAD_FIELDS))
    bad = uniform(seed, c("src"), 7) < opts.malformed
    value = F.when(bad, corrupt(good, seed, c("src"), [
        F.to_json(F.struct("tx_id", "labelled_at")),
        F.to_json(F.struct("tx_id", F.lit("maybe").alias("is_fraud"), "labelled_at")),
    ])).otherwise(good)
    return df.select(value.alias("value"), *metadata(opts, start_ms, c("tx_id")))
