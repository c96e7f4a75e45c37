"""``generator://?kind=transactions`` — card transactions, a small share of them fraud, computed in the JVM.

Each card has a home country and a typical amount (stable per card and seed). A genuine
transaction is mostly at home, in everyday merchant categories, near the card's typical amount;
a fraudulent one (share ``fraud``, default 1%) is mostly abroad, in categories that resell well
(electronics, gift cards, jewelry, online) and several times the typical amount — patterns a
model can learn, with overlap so that it cannot be perfect. From ``drift`` on (an event time after
the start), fraud changes its pattern: at home, small amounts, everyday shops.

The payload is what a card network would send: ``{tx_id, card_id, time, amount,
merchant_category, country}``. Whether a transaction was fraud is **not** in it: nobody knows at
payment time, the bank learns it later from chargebacks. The ground truth is the same pure
function of (seed, n): ``transaction_rows`` gives it as the column ``is_fraud`` for training and
evaluation (``speedlayer train fraud``).

    generator://?kind=transactions&rate=200&cards=2000&fraud=0.01&seed=7&drift=10min
"""

from __future__ import annotations

from pydantic import Field, field_validator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import parse_duration
from speedlayer.sources.generator_kit import GeneratorOptions, corrupt, iso_time, kind_options, metadata, pick, timeline, uniform

COUNTRIES = (("DE", 0.40), ("FR", 0.15), ("NL", 0.10), ("IT", 0.10), ("ES", 0.10), ("PL", 0.08), ("AT", 0.07))
#: where fraudsters use a card abroad
FOREIGN = (("US", 0.25), ("GB", 0.2), ("NG", 0.15), ("BR", 0.15), ("RU", 0.1), ("CN", 0.15))
GENUINE_MIX = (("grocery", 0.30), ("restaurant", 0.20), ("retail", 0.18), ("fuel", 0.12), ("online", 0.10),
               ("travel", 0.05), ("electronics", 0.03), ("jewelry", 0.01), ("gift_cards", 0.01))
FRAUD_MIX = (("electronics", 0.30), ("gift_cards", 0.25), ("online", 0.20), ("jewelry", 0.15), ("travel", 0.05),
             ("retail", 0.05))
PAYLOAD_FIELDS = ("tx_id", "card_id", "time", "amount", "merchant_category", "country")


#: after the drift, fraud tests a card at home with small amounts where genuine customers shop
DRIFTED_MIX = (("grocery", 0.35), ("fuel", 0.25), ("restaurant", 0.2), ("retail", 0.2))


class TransactionOptions(GeneratorOptions):
    """``generator://?kind=transactions``: the generator's options, the cards, the share of fraud and
    when its pattern changes."""

    cards: int = Field(2000, gt=0, description="cards paying")
    fraud: float = Field(0.01, ge=0, le=1, description="fraction of fraudulent transactions")
    drift: str | None = Field(None, description="event time after the start from which fraud changes its pattern "
                              "(at home, small amounts, everyday shops): 5min; default never")

    @field_validator("drift")
    @classmethod
    def _drift_is_a_duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value

    def drift_at(self) -> int | None:
        """The first transaction number of the drifted pattern (None: no drift).

        >>> TransactionOptions(kind="transactions", rate=200, drift="5min").drift_at()
        60000
        """
        return None if self.drift is None else parse_duration(self.drift) * self.rate // 1000


def card_traits(opts: GeneratorOptions, card: Column) -> tuple[Column, Column]:
    """(home country, typical amount) of a card: stable per (seed, card)."""
    home = pick(uniform(opts.seed + 2, card, 1), COUNTRIES)
    typical = F.round(F.lit(8.0) + 150.0 * F.pow(uniform(opts.seed + 2, card, 2), 2), 2)
    return home, typical


def was_fraud(opts: TransactionOptions, tx: Column) -> Column:
    """Whether transaction number ``tx`` is fraud: the ground truth its label carries later.

    >>> was_fraud(TransactionOptions(kind="transactions"), F.col("n"))  # doctest: +SKIP
    """
    return uniform(opts.seed, tx, 11) < opts.fraud


def transaction_rows(seq: DataFrame, opts: TransactionOptions, start_ms: int) -> DataFrame:
    """Typed transactions with their ground truth: the payload fields, ``event_ms``, ``is_fraud`` (0/1), ``n``.

    >>> transaction_rows(spark.range(5).withColumnRenamed("id", "n"), TransactionOptions(), 0)  # doctest: +SKIP
    """
    c, seed = F.col, opts.seed
    df = timeline(seq, opts, start_ms)
    src = c("src")

    def u(salt: int) -> Column:
        return uniform(seed, src, salt)

    df = df.select("n", "src", "event_ms", F.floor(u(10) * opts.cards).cast("long").alias("card"),
                   was_fraud(opts, src).alias("fraud"))
    home, typical = card_traits(opts, c("card"))
    df = df.select("*", home.alias("home"), typical.alias("typical"))
    fraud = c("fraud")
    drift = opts.drift_at()
    drifted = fraud & (src >= drift) if drift is not None else F.lit(False)
    country = (F.when(drifted, c("home"))
               .when(fraud & (u(12) < 0.7), pick(u(13), FOREIGN))
               .when(~fraud & (u(12) < 0.04), pick(u(13), COUNTRIES + FOREIGN[:2]))
               .otherwise(c("home")))
    category = (F.when(drifted, pick(u(14), DRIFTED_MIX)).when(fraud, pick(u(14), FRAUD_MIX))
                .otherwise(pick(u(14), GENUINE_MIX)))
    spread = (F.when(drifted, 0.04 + 0.2 * u(16)).when(fraud & (u(15) < 0.8), 2.0 + 8.0 * u(16))
              .otherwise(0.3 + 1.4 * u(16)))
    return df.select(
        "n", "src", "event_ms",
        F.format_string("t-%08d", src).alias("tx_id"),
        F.format_string("C%05d", c("card")).alias("card_id"),
        iso_time(c("event_ms")).alias("time"),
        F.round(c("typical") * spread, 2).alias("amount"),
        category.alias("merchant_category"),
        country.alias("country"),
        fraud.cast("int").alias("is_fraud"),
    )


@kind_options(TransactionOptions)
def transaction_events(seq: DataFrame, opts: TransactionOptions, start_ms: int) -> DataFrame:
    """RAW rows of card transactions (no fraud label in the payload); key = the card."""
    c = F.col
    df = transaction_rows(seq, opts, start_ms)
    good = F.to_json(F.struct(*PAYLOAD_FIELDS))
    bad = uniform(opts.seed, c("src"), 7) < opts.malformed
    others = [f for f in PAYLOAD_FIELDS if f != "amount"]
    value = F.when(bad, corrupt(good, opts.seed, c("src"), [
        F.to_json(F.struct(*others)),
        F.to_json(F.struct(*others, F.lit("12,50 EUR").alias("amount"))),
        F.to_json(F.struct(*others, F.lit(-5.0).alias("amount"))),
    ])).otherwise(good)
    return df.select(value.alias("value"), *metadata(opts, start_ms, c("card_id")))
