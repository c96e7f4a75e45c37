"""The fraud job: score each card transaction as it arrives with a pre-trained model, alert above a threshold.

The model is fitted in batch by ``speedlayer train fraud`` (see ``speedlayer.pipelines.fraud.model``); the
stream loads it, joins each transaction with its card's profile from a static table, and scores
it with the very functions training used. Re-sent transactions are dropped by ``tx_id``
(``FRAUD.dedup_key``) within the watermark (``speedlayer.pipelines.dedup``); a transaction behind
the watermark is never scored, and goes to the ``late`` output (``speedlayer.pipelines.late``).

    speedlayer train fraud --model models/fraud
    speedlayer run fraud --option model=models/fraud --option threshold=0.5
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from speedlayer.core.durations import parse_duration
from speedlayer.core.errors import ConfigError
from speedlayer.core.modes import APPEND, UPDATE
from speedlayer.core.tables import TableRef
from speedlayer.decode.validate import Decoded
from speedlayer.pipelines.base import DEAD_LETTERS, LATE, Job, LazyOutputs, Output, Params
from speedlayer.pipelines.dedup import drop_duplicates
from speedlayer.pipelines.fraud.incremental import IncrementalLearner
from speedlayer.pipelines.fraud.learning import Learner, ModelStore, Served
from speedlayer.pipelines.fraud.model import check_model, load_model, score
from speedlayer.pipelines.fraud.schemas import CARD_LABEL, CARD_TRANSACTION
from speedlayer.pipelines.fraud.training import FRAUD_TRAINER
from speedlayer.pipelines.late import late_events
from speedlayer.pipelines.ops import with_watermark
from speedlayer.pipelines.tables import reference_table

ALERT_COLUMNS = ("tx_id", "card_id", "time", "amount", "merchant_category", "country", "home_country", "avg_amount",
                 "fraud_score")
#: a payment's own fields, as it is scored
PAYMENT_COLUMNS = ("tx_id", "card_id", "time", "amount", "merchant_category", "country")


class FraudOptions(BaseModel):
    """``--option model=DIR --option threshold=0.5 --option profiles=DIR``."""

    model: str = Field("models/fraud", description="directory written by speedlayer train fraud")
    threshold: float = Field(0.5, ge=0, le=1, description="alert when the fraud probability is at least this")
    profiles: str | None = Field(None, description="card-profile table (parquet directory); default: <model>/profiles")
    label_within: str = Field("1h", description="how long after a payment its label may arrive (verdicts)")
    learn: bool = Field(False, description="score with the newest model the run learns from the labels (model-updates); "
                        "each score names its version")
    refit_every: int = Field(2000, gt=0, description="labels between two new versions of the learning model (a "
                             "refit, or the incremental learner's weights tried against the served version)")
    learn_window: int = Field(20000, gt=100, description="the newest labels a refit learns from (a fifth held out)")
    learner: Literal["refit", "incremental"] = Field(
        "refit", description="how the model learns: refit (the pipeline fitted again on the newest labels) or "
        "incremental (its regression stepped by every micro-batch of labels)")
    passes: int = Field(50, gt=0, description="gradient steps over each micro-batch's labels (learner=incremental)")
    step: float = Field(2.0, gt=0, description="size of each gradient step (learner=incremental)")

    @field_validator("refit_every", "learn_window", "learner", "passes", "step")
    @classmethod
    def _only_when_learning(cls, value: Any, info: ValidationInfo) -> Any:
        if not info.data.get("learn"):  # a setting given for learning, in a run that does not learn, is a mistake
            raise ValueError("only a learning run uses it: add --option learn=true")
        return value

    @field_validator("label_within")
    @classmethod
    def _within_is_a_duration(cls, value: str) -> str:
        if parse_duration(value) <= 0:
            raise ValueError("must be longer than zero: e.g. 1h")
        return value


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


def _profiles_path(options: FraudOptions) -> str:
    return options.profiles or str(Path(options.model).expanduser().resolve() / "profiles")


def _tables(params: Params) -> dict[str, TableRef]:
    """The card profiles the scores join, for ``speedlayer sql``."""
    return {"profiles": TableRef("parquet", _profiles_path(params.options or FraudOptions()))}


def unique_transactions(events: DataFrame, params: Params) -> DataFrame:
    """The transactions behind the watermark, each once."""
    return drop_duplicates(with_watermark(events, params, CARD_TRANSACTION.time_field), params, FRAUD.dedup_key)


def scored_transactions(events: DataFrame, params: Params) -> DataFrame:
    """Each (deduplicated) transaction with its card profile and ``fraud_score``."""
    options: FraudOptions = params.options or FraudOptions()
    profiles_path = _profiles_path(options)
    # pinned: the profiles the model was trained with, the same for every batch and its replay
    profiles = reference_table(events.sparkSession, profiles_path, "parquet", name=f"card-profile table {profiles_path}")
    return score(unique_transactions(events, params).drop("ingest_time"), load_model(options.model), profiles)


def _store(params: Params) -> ModelStore:
    return ModelStore(Path(params.state_dir or ".") / "models", Path((params.options or FraudOptions()).model))


def _served(output: Output, params: Params) -> Output:
    """``scores`` or ``alerts`` of a learning run: scored per micro-batch by the version current then."""
    options: FraudOptions = params.options or FraudOptions()
    if not options.learn:
        return output
    threshold = options.threshold if output.name == "alerts" else 0.0
    return dataclasses.replace(output, per_batch=Served(_store(params), _profiles_path(options), ALERT_COLUMNS, threshold))


def _learner(output: Output, params: Params) -> Output:
    options: FraudOptions = params.options or FraudOptions()
    if options.learner == "incremental":
        learner = IncrementalLearner(_store(params), options.refit_every, options.passes, options.step)
    else:
        learner = Learner(_store(params), options.refit_every, options.learn_window)
    return dataclasses.replace(output, per_batch=learner)


def _check_learning(params: Params, mode: str) -> None:
    if not (params.options or FraudOptions()).learn:
        raise ConfigError("output 'model-updates' is the learning model's: run with --option learn=true")


def verdicts(scored: DataFrame, labels: Decoded | None, params: Params) -> DataFrame:
    """Each scored transaction with the verdict its label brought later: a stream-stream join on ``tx_id``,
    the label at most ``label_within`` after the payment, so both sides' state is bounded by the
    watermark and that time.

    >>> verdicts(scored, decode(raw_labels, CARD_LABEL), Params(options=FraudOptions())).columns  # doctest: +SKIP
    """
    labels = _labels_given(labels, "verdicts")
    paid = scored.select(*ALERT_COLUMNS).withColumnRenamed("tx_id", "paid_tx")
    joined = paid.join(_first_labels(labels, params).select("tx_id", "is_fraud", "labelled_at"), _paid_before(params))
    return joined.select(*ALERT_COLUMNS, "is_fraud", "labelled_at")


def _labels_given(labels: Decoded | None, output: str) -> Decoded:
    if labels is None:
        raise ConfigError(f"output {output!r} joins the transactions' labels: give their source with --labels URI "
                          "(e.g. --labels 'generator://?kind=labels')")
    return labels


def _first_labels(labels: Decoded, params: Params) -> DataFrame:
    """Each transaction's first label within the watermark (its offset kept as ``label_offset``): the one that counts."""
    watermarked = with_watermark(labels.events, params, CARD_LABEL.time_field)
    return drop_duplicates(watermarked.withColumn("label_offset", F.col("offset")), params, "tx_id")


def _paid_before(params: Params) -> Column:
    """A label (``tx_id``, ``labelled_at``) matches a payment (``paid_tx``, ``time``) at most ``label_within`` before it."""
    within = parse_duration((params.options or FraudOptions()).label_within)
    return F.expr(f"paid_tx = tx_id AND labelled_at >= time AND labelled_at <= time + INTERVAL {within} MILLISECONDS")


def label_dead_letters(events: DataFrame, labels: Decoded | None, params: Params) -> DataFrame:
    """The labels the verdicts cannot use, each with its reason (the dead-letter columns): one that failed to
    parse or validate; a second label for a transaction (its first within the watermark counts); one that
    names no transaction paid within ``label_within`` before it, known once the watermark passes the label
    (a left-outer stream-stream join). A repeated label is dead-lettered as a repeat, never as unmatched too.

    >>> label_dead_letters(decoded.events, decode(raw_labels, CARD_LABEL), params).columns  # doctest: +SKIP
    ['payload', 'reason', 'ingest_time', 'key', 'offset']
    """
    labels = _labels_given(labels, "label-dead-letters")
    if not labels.events.isStreaming or params.stateless:  # no watermark to know when a label found nothing
        return labels.dead_letters
    first = _first_labels(labels, params)
    return (labels.dead_letters.unionByName(_as_dead_letters(_unmatched_labels(first, events, params)))
            .unionByName(_as_dead_letters(_repeated_labels(first, labels, params))))


def _unmatched_labels(first: DataFrame, events: DataFrame, params: Params) -> DataFrame:
    """First labels no payment matched, with the reason, once the watermark has passed them."""
    paid = with_watermark(events, params, CARD_TRANSACTION.time_field).select(F.col("tx_id").alias("paid_tx"), "time")
    within = (params.options or FraudOptions()).label_within
    return (first.join(paid, _paid_before(params), "left_outer").where(F.col("paid_tx").isNull())
            .select("*", F.format_string(f"no transaction %s within {within} before the label", "tx_id").alias("reason")))


def _repeated_labels(first: DataFrame, labels: Decoded, params: Params) -> DataFrame:
    """Every label but the first of its transaction (a stream-stream join of all labels with the first ones)."""
    every = with_watermark(labels.events, params, CARD_LABEL.time_field).select(
        F.col("tx_id").alias("again_tx"), F.col("labelled_at").alias("again_at"), F.col("is_fraud").alias("again_fraud"),
        F.col("ingest_time").alias("again_ingest"), F.col("offset").alias("again_offset"))
    bound = f"INTERVAL {params.watermark_ms} MILLISECONDS"  # how long the dedup remembers a first label
    joined = every.join(first.select("tx_id", "labelled_at", "label_offset"), F.expr(
        f"again_tx = tx_id AND again_offset != label_offset AND again_at BETWEEN labelled_at - {bound} "
        f"AND labelled_at + {bound}"))
    return joined.select(
        F.col("again_tx").alias("tx_id"), F.col("again_fraud").alias("is_fraud"), F.col("again_at").alias("labelled_at"),
        F.col("again_ingest").alias("ingest_time"), F.col("again_offset").alias("label_offset"),
        F.format_string("a second label for %s (the first, offset %s, counts)", "tx_id", "label_offset").alias("reason"))


def _as_dead_letters(rows: DataFrame) -> DataFrame:
    """Decoded labels with a ``reason`` in the dead-letter columns: the payload is the label as decoded."""
    payload = F.to_json(F.struct("tx_id", "is_fraud", F.date_format("labelled_at", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
                                 .alias("labelled_at")))
    return rows.select(payload.alias("payload"), "reason", "ingest_time", F.col("tx_id").alias("key"),
                       F.col("label_offset").alias("offset"))


def fraud_pipeline(events: DataFrame, params: Params, labels: Decoded | None = None) -> Mapping[str, DataFrame]:
    """``scores``, ``alerts`` (both from one scoring), ``verdicts`` (the scores with their later labels) and
    ``late``: transactions behind the watermark, never scored.

    >>> sorted(fraud_pipeline(decoded.events, Params(options=FraudOptions())))  # doctest: +SKIP
    ['alerts', 'late', 'scores', 'verdicts']
    """
    options: FraudOptions = params.options or FraudOptions()

    @functools.cache
    def scored() -> DataFrame:
        return scored_transactions(events, params)

    if options.learn:  # scored per micro-batch, by the version current then (learning.Served)
        paid = lambda: unique_transactions(events, params).select(*PAYMENT_COLUMNS)  # noqa: E731
        scores = alerts = paid
    else:
        scores = lambda: scored().select(*ALERT_COLUMNS)  # noqa: E731
        alerts = lambda: scored().where(F.col("fraud_score") >= options.threshold).select(*ALERT_COLUMNS)  # noqa: E731
    return LazyOutputs({
        "scores": scores,
        "alerts": alerts,
        "verdicts": lambda: verdicts(scored(), labels, params),
        "model-updates": lambda: verdicts(scored(), labels, params),
        "label-dead-letters": lambda: label_dead_letters(events, labels, params),
        "late": lambda: late_events(with_watermark(events, params, CARD_TRANSACTION.time_field), FRAUD, params),
    })


FRAUD = Job(
    name="fraud",
    summary="card transactions scored by a pre-trained model (speedlayer train fraud); alerts above a threshold",
    schema=CARD_TRANSACTION,
    pipeline=fraud_pipeline,
    outputs={
        "alerts": Output("alerts", "transactions whose fraud score is at least --option threshold, with the card profile",
                         (APPEND, UPDATE), APPEND, True, ("tx_id",), configure=_served),
        "scores": Output("scores", "every transaction with its fraud score", (APPEND, UPDATE), APPEND, True, ("tx_id",),
                         configure=_served),
        "model-updates": Output("model-updates", "each refit of the learning model (--option learn=true): the version, "
                                "what it learned from, its held-out ROC AUC against the one it would replace, kept or not",
                                (APPEND,), APPEND, True, ("version", "at_batch"), check=_check_learning,
                                configure=_learner, inputs=("labels",)),
        "verdicts": Output("verdicts", "each scored transaction with the verdict its label (--labels) brought later: "
                           "is_fraud, labelled_at", (APPEND,), APPEND, True, ("tx_id",), inputs=("labels",)),
        "label-dead-letters": Output("label-dead-letters", "labels (--labels) the verdicts cannot use, with the reason: "
                                     "malformed, a second label for a transaction, or naming no transaction paid "
                                     "within --option label_within before it", (APPEND,), APPEND, True, ("offset",),
                                     inputs=("labels",)),
        "dead-letters": DEAD_LETTERS,
        "late": dataclasses.replace(LATE, summary=(
            "transactions that arrived behind the watermark (never scored: the dedup drops them), with the "
            "--window (10s) they fell in, the watermark they missed and the copies that arrived")),
    },
    default_outputs=("alerts",),
    dedup_key="tx_id",
    default_source="generator://?kind=transactions&rate=200",
    shared_paths=model_paths,
    defaults={"watermark": "30s"},
    options=FraudOptions,
    check=check,
    trainer=FRAUD_TRAINER,
    tables=_tables,
    inputs={"labels": CARD_LABEL},
)
