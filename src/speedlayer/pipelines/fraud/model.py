"""The fraud model: features shared by training and scoring, ``train`` (batch), and loading a saved model.

Batch and stream use one code path: ``card_features`` joins a transaction DataFrame (static or
streaming) with the static card-profile table and derives the features; the saved Spark ML
``PipelineModel`` turns them into a fraud probability. ``train`` fits that pipeline on a generated,
labelled history, builds the card profiles from the same history, scores a later held-out stretch
of generated transactions with exactly the streaming path, and saves everything in one directory:

    <model>/pipeline               Spark ML PipelineModel (category index, one-hot, assembler, logistic regression)
    <model>/profiles               card profiles (parquet): card_id, home_country, avg_amount, transactions
    <model>/speedlayer-model.json  what was trained on, and the held-out precision / recall

    speedlayer train fraud --model models/fraud
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from speedlayer.core.errors import ConfigError

MODEL_FORMAT = 1
METADATA = "speedlayer-model.json"
FEATURES = ("log_amount", "log_amount_ratio", "foreign", "category_vec")


def card_features(transactions: DataFrame, profiles: DataFrame) -> DataFrame:
    """Transactions joined with their card's profile, plus the model's input columns.

    A card without a profile counts as at home with a typical amount (ratio 1).

    >>> card_features(tx_df, spark.read.parquet("models/fraud/profiles")).columns  # doctest: +SKIP
    """
    joined = transactions.join(F.broadcast(profiles.select("card_id", "home_country", "avg_amount")), "card_id", "left")
    return with_features(joined)


def with_features(joined: DataFrame) -> DataFrame:
    """Transactions that carry their card's ``home_country`` and ``avg_amount``, plus the model's input columns."""
    ratio = F.coalesce(F.col("amount") / F.col("avg_amount"), F.lit(1.0))
    return joined.select(
        "*",
        F.log1p("amount").alias("log_amount"),
        F.log(F.greatest(ratio, F.lit(1e-3))).alias("log_amount_ratio"),
        F.coalesce((F.col("country") != F.col("home_country")).cast("double"), F.lit(0.0)).alias("foreign"),
    )


def card_profiles(history: DataFrame) -> DataFrame:
    """Per card, from labelled history: home country (most frequent) and average genuine amount."""
    genuine = history.where(F.col("is_fraud") == 0)
    return genuine.groupBy("card_id").agg(
        F.mode("country").alias("home_country"),
        F.round(F.avg("amount"), 2).alias("avg_amount"),
        F.count(F.lit(1)).alias("transactions"),
    )


def fraud_pipeline(max_iter: int = 100):
    """The unfitted Spark ML pipeline over ``card_features``' columns (label ``is_fraud``)."""
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import OneHotEncoder, StringIndexer, VectorAssembler

    return Pipeline(stages=[
        StringIndexer(inputCol="merchant_category", outputCol="category_index", handleInvalid="keep"),
        OneHotEncoder(inputCol="category_index", outputCol="category_vec", handleInvalid="keep"),
        VectorAssembler(inputCols=list(FEATURES), outputCol="features"),
        LogisticRegression(labelCol="is_fraud", featuresCol="features", maxIter=max_iter, regParam=0.001),
    ])


def score(transactions: DataFrame, model: Any, profiles: DataFrame) -> DataFrame:
    """``transactions`` with the profile columns and ``fraud_score`` (probability of fraud), in the JVM."""
    from pyspark.ml.functions import vector_to_array

    scored = model.transform(card_features(transactions, profiles))
    return scored.select(*transactions.columns, "home_country", "avg_amount",
                         F.round(vector_to_array("probability")[1], 6).alias("fraud_score"))


@dataclass(frozen=True)
class Evaluation:
    """Held-out quality at a threshold."""

    threshold: float
    transactions: int
    frauds: int
    alerts: int
    true_alerts: int
    auc: float

    @property
    def precision(self) -> float:
        return self.true_alerts / self.alerts if self.alerts else 0.0

    @property
    def recall(self) -> float:
        return self.true_alerts / self.frauds if self.frauds else 0.0


def evaluate(scored: DataFrame, threshold: float) -> Evaluation:
    """Precision, recall and ROC AUC of scored, labelled transactions."""
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    alert = F.col("fraud_score") >= threshold
    row = scored.agg(F.count(F.lit(1)).alias("n"), F.sum("is_fraud").alias("frauds"),
                     F.sum(alert.cast("int")).alias("alerts"),
                     F.sum((alert & (F.col("is_fraud") == 1)).cast("int")).alias("hits")).first()
    auc = BinaryClassificationEvaluator(rawPredictionCol="fraud_score", labelCol="is_fraud").evaluate(
        scored.select(F.col("fraud_score").cast("double"), F.col("is_fraud").cast("double")))
    return Evaluation(threshold, row.n, int(row.frauds or 0), int(row.alerts or 0), int(row.hits or 0), auc)


def labelled(spark: SparkSession, generator_uri: str, first: int, end: int) -> DataFrame:
    """Generated transactions ``first`` … ``end - 1`` with their ground truth, typed like decoded events."""
    from speedlayer.core.uris import parse_uri
    from speedlayer.pipelines.fraud.transaction_kind import transaction_rows
    from speedlayer.sources.generator import GeneratorSource

    gen = GeneratorSource(parse_uri(generator_uri, "--generator URI"))
    if gen.options.kind != "transactions":
        raise ConfigError(f"training needs transactions: use --generator 'generator://?kind=transactions&...', "
                          f"not {generator_uri!r}")
    seq = spark.range(first, end, numPartitions=spark.sparkContext.defaultParallelism).select(F.col("id").alias("n"))
    rows = transaction_rows(seq, gen.options, gen._start())
    return rows.where(F.col("n") == F.col("src")).select(  # re-sent copies are not new history
        "tx_id", "card_id", F.timestamp_millis("event_ms").alias("time"), "amount", "merchant_category", "country",
        "is_fraud")


def train(spark: SparkSession, model_dir: str, generator_uri: str, events: int, holdout: int,
          threshold: float = 0.5, max_iter: int = 100) -> dict[str, Any]:
    """Fit on events 0 … events-1, evaluate on the next ``holdout``, save to ``model_dir``; the metadata.

    >>> train(spark, "models/fraud", "generator://?kind=transactions&seed=42", 100_000, 20_000)  # doctest: +SKIP
    """
    began = time.monotonic()
    history = labelled(spark, generator_uri, 0, events).cache()
    profiles = card_profiles(history).cache()
    model = fraud_pipeline(max_iter).fit(card_features(history, profiles))
    held_out = labelled(spark, generator_uri, events, events + holdout)
    scored = score(held_out.drop("is_fraud"), model, profiles).join(held_out.select("tx_id", "is_fraud"), "tx_id").cache()
    result = evaluate(scored, threshold)
    path = Path(model_dir).resolve()
    model.write().overwrite().save(str(path / "pipeline"))
    profiles.write.mode("overwrite").parquet(str(path / "profiles"))
    metadata = {
        "job": "fraud", "format": MODEL_FORMAT, "features": list(FEATURES), "generator": generator_uri,
        "history": {"transactions": history.count(), "frauds": int(history.agg(F.sum("is_fraud")).first()[0] or 0),
                    "cards": profiles.count()},
        "holdout": {"transactions": result.transactions, "frauds": result.frauds, "threshold": threshold,
                    "alerts": result.alerts, "true_alerts": result.true_alerts,
                    "precision": round(result.precision, 4), "recall": round(result.recall, 4),
                    "roc_auc": round(result.auc, 4)},
        "seconds": round(time.monotonic() - began, 1),
    }
    (path / METADATA).write_text(json.dumps(metadata, indent=2))
    history.unpersist()
    scored.unpersist()
    return metadata


def check_model(model_dir: str) -> dict[str, Any]:
    """The saved model's metadata; a missing or foreign directory is a one-line ConfigError."""
    path = Path(model_dir).expanduser().resolve()
    hint = f"train one first: speedlayer train fraud --model {model_dir}"
    if not path.is_dir():
        raise ConfigError(f"no fraud model at {path}: {hint}")
    try:
        metadata = json.loads((path / METADATA).read_text())
    except (OSError, ValueError):
        raise ConfigError(f"{path} is not a speedlayer fraud model (no readable {METADATA}): {hint}") from None
    if (metadata.get("job") != "fraud" or metadata.get("format") != MODEL_FORMAT
            or list(metadata.get("features", [])) != list(FEATURES)):
        raise ConfigError(f"the model at {path} was made for another job or version (format {metadata.get('format')!r}, "
                          f"features {metadata.get('features')}): retrain it with speedlayer train fraud --model {model_dir}")
    for part in ("pipeline", "profiles"):
        if not (path / part).is_dir():
            raise ConfigError(f"the model at {path} lacks its {part}/ directory: {hint}")
    return metadata


_LOADED: dict[tuple[str, float], Any] = {}


def load_model(model_dir: str) -> Any:
    """The saved PipelineModel (loaded once per directory and version); a broken one is a one-line ConfigError."""
    from pyspark.ml import PipelineModel

    check_model(model_dir)
    path = Path(model_dir).expanduser().resolve() / "pipeline"
    key = (str(path), (path.parent / METADATA).stat().st_mtime)
    if key not in _LOADED:
        try:
            _LOADED[key] = PipelineModel.load(str(path))
        except Exception as exc:  # noqa: BLE001 — Spark's reason, in one line
            reason = next((ln.strip() for ln in str(getattr(exc, "desc", exc)).splitlines() if ln.strip()), "")
            raise ConfigError(f"cannot load the fraud model at {path} ({reason[:200]}): retrain it with "
                              f"speedlayer train fraud --model {model_dir}") from None
    return _LOADED[key]
