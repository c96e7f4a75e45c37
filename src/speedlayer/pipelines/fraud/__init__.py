"""The fraud job: score each card transaction as it arrives with a pre-trained model, alert above a threshold.

The model is fitted in batch by ``speedlayer train fraud`` (see ``speedlayer.pipelines.fraud.model``); the
stream loads it, joins each transaction with its card's profile from a static table, and scores
it with the very functions training used. Re-sent transactions are dropped by ``tx_id`` within
the watermark (``speedlayer.pipelines.dedup``).

    speedlayer train fraud --model models/fraud
    speedlayer run fraud --option model=models/fraud --option threshold=0.5
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import spark_interval
from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND, UPDATE
from speedlayer.core.schemas import CARD_TRANSACTION
from speedlayer.pipelines.base import DEAD_LETTERS, Job, Output, Params
from speedlayer.pipelines.dedup import drop_duplicates
from speedlayer.pipelines.fraud.model import check_model, load_model, score

ALERT_COLUMNS = ("tx_id", "card_id", "time", "amount", "merchant_category", "country", "home_country", "avg_amount",
                 "fraud_score")


class FraudOptions(BaseModel):
    """``--option model=DIR --option threshold=0.5 --option profiles=DIR``."""

    model: str = Field("models/fraud", description="directory written by speedlayer train fraud")
    threshold: float = Field(0.5, ge=0, le=1, description="alert when the fraud probability is at least this")
    profiles: str | None = Field(None, description="card-profile table (parquet directory); default: <model>/profiles")


def check(params: Params) -> None:
    """Before start: the model exists and fits this job, the profile table exists."""
    options: FraudOptions = params.options
    check_model(options.model)
    if options.profiles and not Path(options.profiles).expanduser().exists():
        raise ConfigError(f"card-profile table {options.profiles} does not exist: give a parquet directory, "
                          "or leave --option profiles out to use the model's")


def model_paths(params: Params) -> dict[str, Path]:
    """The model and profile directories: Spark reads both on the executors."""
    options: FraudOptions = params.options or FraudOptions()
    model = Path(options.model).expanduser().resolve()
    paths = {"--option model": model}
    if options.profiles:
        paths["--option profiles"] = Path(options.profiles).expanduser().resolve()
    return paths


def scored_transactions(events: DataFrame, params: Params) -> DataFrame:
    """Each (deduplicated) transaction with its card profile and ``fraud_score``."""
    options: FraudOptions = params.options or FraudOptions()
    spark = events.sparkSession
    profiles_path = options.profiles or str(Path(options.model).expanduser().resolve() / "profiles")
    profiles = spark.read.parquet(profiles_path)
    if events.isStreaming and not params.continuous:
        events = events.withWatermark("time", spark_interval(params.watermark_ms))
    events = drop_duplicates(events, params, "tx_id")
    return score(events.drop("ingest_time"), load_model(options.model), profiles)


def fraud_pipeline(events: DataFrame, params: Params) -> Mapping[str, DataFrame]:
    options: FraudOptions = params.options or FraudOptions()
    scored = scored_transactions(events, params)
    return {"scores": scored.select(*ALERT_COLUMNS),
            "alerts": scored.where(F.col("fraud_score") >= options.threshold).select(*ALERT_COLUMNS)}


FRAUD = Job(
    name="fraud",
    summary="card transactions scored by a pre-trained model (speedlayer train fraud); alerts above a threshold",
    schema=CARD_TRANSACTION,
    pipeline=fraud_pipeline,
    outputs={
        "alerts": Output("alerts", "transactions whose fraud score is at least --option threshold, with the card profile",
                         (APPEND, UPDATE), APPEND, True, ("tx_id",)),
        "scores": Output("scores", "every transaction with its fraud score", (APPEND, UPDATE), APPEND, True, ("tx_id",)),
        "dead-letters": DEAD_LETTERS,
    },
    default_outputs=("alerts",),
    default_source="generator://?kind=transactions&rate=200",
    shared_paths=model_paths,
    defaults={"watermark": "30s"},
    options=FraudOptions,
    check=check,
)
