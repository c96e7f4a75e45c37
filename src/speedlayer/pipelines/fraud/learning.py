"""A fraud model that keeps learning from the verdicts, and the versions the scores are served from.

With ``--option learn=true`` the run keeps its models under ``<state dir>/models``:

    labelled/batch=<id>/        the verdicts of each micro-batch (transactions with their label), as training data;
                                the newest twice ``learn_window`` rows are kept, counted in labelled/_counts.json
    v0003-b000041/              a version: pipeline/ (Spark ML) and version.json (what it was fitted on, its held-out AUC)
    CURRENT                     the version the scores use; none yet: the model ``speedlayer train fraud`` made

``model-updates`` (one micro-batch at a time, inside ``foreachBatch``) appends its batch's verdicts,
and once ``refit_every`` new labels have come since the current version, refits the pipeline on the
newest ``learn_window`` labels but the newest fifth, which it holds out: the new fit replaces the
current version only when its ROC AUC on those held-out labels is at least the current one's, and
each attempt is a row of the output either way. A replayed batch finds the version it made and
makes none again. ``scores`` and ``alerts`` score each micro-batch with the version current at its
start, named in ``model_version``: a new version is taken up between micro-batches, and a restart
goes on with the newest.

>>> store = ModelStore(Path("state/fraud/models"), Path("models/fraud"))  # doctest: +SKIP
>>> store.current()                                                         # doctest: +SKIP
('v0', PosixPath('models/fraud/pipeline'))
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.window import Window

from speedlayer.core.spark_errors import raise_if_interrupted, spark_reason
from speedlayer.pipelines.fraud.model import evaluate, fraud_pipeline, score, with_features

log = logging.getLogger("speedlayer.pipelines")

CURRENT = "CURRENT"
#: the labels seen at the last refit tried (kept or not): the next waits for refit_every more
LAST_REFIT = "last-refit.json"
#: the output model-updates' rows
UPDATE_SCHEMA = T.StructType([
    T.StructField("version", T.StringType()), T.StructField("at_batch", T.LongType()),
    T.StructField("trained_on", T.LongType()), T.StructField("held_out", T.LongType()),
    T.StructField("roc_auc", T.DoubleType()), T.StructField("previous", T.StringType()),
    T.StructField("previous_roc_auc", T.DoubleType()), T.StructField("accepted", T.BooleanType()),
])
_LOADED: dict[str, Any] = {}
_PROFILES: dict[str, Any] = {}


class ModelStore:
    """The versions of a learning run's model, under ``root``; before the first, ``initial`` (a trained model dir)."""

    def __init__(self, root: Path, initial: Path):
        self.root, self.initial = Path(root), Path(initial).expanduser().resolve()

    def current(self) -> tuple[str, Path]:
        """(name, pipeline directory) of the version the scores use."""
        pointer = self.root / CURRENT
        if pointer.is_file():
            name = pointer.read_text().strip()
            return name, self.root / name / "pipeline"
        return "v0", self.initial / "pipeline"

    def model(self) -> tuple[str, Any]:
        """The current version's name and fitted pipeline (loaded once per version)."""
        from pyspark.ml import PipelineModel

        name, path = self.current()
        if str(path) not in _LOADED:
            _LOADED[str(path)] = PipelineModel.load(str(path))
        return name, _LOADED[str(path)]

    def made_at(self, batch_id: int) -> Path | None:
        """The version a batch made, if it made one (a replay makes none again)."""
        return next(iter(sorted(self.root.glob(f"v*-b{batch_id:06d}"))), None)

    def publish(self, batch_id: int, model: Any, record: dict[str, Any]) -> str:
        """Save a version made at ``batch_id`` and make it the current one (the pointer replaced atomically)."""
        number = 1 + sum(1 for _ in self.root.glob("v*-b*"))
        name = f"v{number:04d}-b{batch_id:06d}"
        model.write().overwrite().save(str(self.root / name / "pipeline"))
        (self.root / name / "version.json").write_text(json.dumps({**record, "version": name}, indent=2))
        replace_file(self.root / CURRENT, name)
        return name


def learn(rows: DataFrame, batch_id: int, store: ModelStore, refit_every: int, window: int,
          fit: Callable[[DataFrame], Any] | None = None) -> DataFrame:
    """One micro-batch of verdicts: kept as training data, and a refit when ``refit_every`` labels came since the
    current version; the output's rows (``UPDATE_SCHEMA``), one per refit tried. ``fit`` (default: the
    training pipeline's) fits featured rows; a refit it fails or one worse than the current version is
    not accepted, and says so in one line on the run's log.

    >>> learn(verdict_rows, 7, store, refit_every=2000, window=20000)  # doctest: +SKIP
    """
    spark = rows.sparkSession
    if rows.isEmpty():  # no verdict came (or the schema is asked for): nothing to keep, nothing to learn
        return spark.createDataFrame([], UPDATE_SCHEMA)
    made = store.made_at(batch_id)
    if made is not None:  # a replay: the version this batch made stands
        return replayed(spark, made)
    fit = fit or fraud_pipeline(max_iter=30).fit
    ledger = _Ledger(store.root / "labelled")
    kept = rows.select("tx_id", "time", "amount", "merchant_category", "country", "home_country", "avg_amount",
                       F.col("is_fraud").cast("int").alias("is_fraud"), "labelled_at")
    ledger.keep(batch_id, kept, window)
    last = store.root / LAST_REFIT
    since = json.loads(last.read_text())["labels_seen"] if last.is_file() else 0
    seen = ledger.seen
    if seen - since < refit_every:
        return spark.createDataFrame([], UPDATE_SCHEMA)
    newest = (spark.read.parquet(str(ledger.root))
              .withColumn("rank", F.row_number().over(Window.orderBy(F.col("labelled_at").desc(), "tx_id")))
              .where(F.col("rank") <= window).cache())
    at_hand = newest.count()  # fewer than the window before it fills
    fifth = max(1, at_hand // 5)
    held = newest.where(F.col("rank") <= fifth)
    train = newest.where(F.col("rank") > fifth)
    current, model = store.model()
    before = _auc(model, held)
    fitted, auc = _try_fit(fit, train, held, batch_id, current)
    record = {"at_batch": batch_id, "trained_on": max(0, at_hand - fifth), "held_out": min(fifth, at_hand), "roc_auc": auc,
              "previous": current, "previous_roc_auc": before, "accepted": auc is not None and auc >= before,
              "labels_seen": seen}
    name = store.publish(batch_id, fitted, record) if record["accepted"] else current
    if auc is not None and not record["accepted"]:
        log.warning("speedlayer: model refit at batch %d kept %s: held-out ROC AUC %.4f < %.4f",
                    batch_id, current, auc, before)
    last.write_text(json.dumps({"labels_seen": seen, "at_batch": batch_id}))
    newest.unpersist()
    return update_row(spark, {**record, "version": name})


def update_row(spark: Any, record: dict[str, Any]) -> DataFrame:
    """``model-updates``' row of one refit tried (``UPDATE_SCHEMA``'s fields of ``record``)."""
    return spark.createDataFrame([tuple(record[f.name] for f in UPDATE_SCHEMA.fields)], UPDATE_SCHEMA)


def replayed(spark: Any, made: Path) -> DataFrame:
    """The row of the version a replayed batch made the first time (it makes none again)."""
    return update_row(spark, json.loads((made / "version.json").read_text()))


def _try_fit(fit: Callable[[DataFrame], Any], train: DataFrame, held: DataFrame, batch_id: int,
             current: str) -> tuple[Any, float | None]:
    """The refit and its held-out ROC AUC; (None, None) when the fit fails, said in one line."""
    try:
        fitted = fit(with_features(train))
        return fitted, _auc(fitted, held)
    except Exception as exc:  # noqa: BLE001 — a failed refit costs that refit, never the run
        raise_if_interrupted(exc)  # the query is stopping: the batch is replayed, its refit tried again
        log.warning("speedlayer: model refit at batch %d failed (%s: %s); %s stays, the run goes on",
                    batch_id, type(exc).__name__, spark_reason(exc)[:200], current)
        return None, None


class _Ledger:
    """The labelled store: one Parquet partition per micro-batch, and ``_counts.json`` with each kept
    partition's rows and the labels seen in all, so that neither needs a scan of the history. A replayed
    batch rewrites its partition and is counted once; partitions older than the newest ``2 x window`` rows
    are deleted (a refit reads the newest ``window``, and labels come roughly in batch order)."""

    def __init__(self, root: Path):
        self.root = root
        book = root / "_counts.json"
        state = json.loads(book.read_text()) if book.is_file() else {"seen": 0, "batches": {}}
        self.seen: int = state["seen"]
        self.batches: dict[str, int] = state["batches"]

    def keep(self, batch_id: int, rows: DataFrame, window: int) -> None:
        rows.write.mode("overwrite").parquet(str(self.root / f"batch={batch_id}"))
        if str(batch_id) not in self.batches:
            count = rows.sparkSession.read.parquet(str(self.root / f"batch={batch_id}")).count()
            self.batches[str(batch_id)] = count
            self.seen += count
        newest_first = sorted(self.batches, key=int, reverse=True)
        total = 0
        for batch in newest_first:
            if total >= 2 * window:
                shutil.rmtree(self.root / f"batch={batch}", ignore_errors=True)
                del self.batches[batch]
            total += self.batches.get(batch, 0)
        replace_file(self.root / "_counts.json", json.dumps({"seen": self.seen, "batches": self.batches}))


def replace_file(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a reader never sees it half written."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def _auc(model: Any, held: DataFrame) -> float:
    from pyspark.ml.functions import vector_to_array

    scored = model.transform(with_features(held)).select(
        F.round(vector_to_array("probability")[1], 6).alias("fraud_score"), "is_fraud")
    return round(evaluate(scored, 0.5).auc, 4)


class Served:
    """``scores``' and ``alerts``' per-batch function when the run learns: the batch's transactions scored
    by the version current at its start (``model_version``), those under ``threshold`` left out."""

    def __init__(self, store: ModelStore, profiles_path: str, columns: tuple[str, ...], threshold: float = 0.0):
        self.store, self.profiles_path, self.columns, self.threshold = store, profiles_path, columns, threshold

    def __call__(self, rows: DataFrame, batch_id: int) -> DataFrame:
        name, model = self.store.model()
        scored = score(rows, model, _profiles(rows.sparkSession, self.profiles_path))
        return scored.where(F.col("fraud_score") >= self.threshold).select(*self.columns, F.lit(name).alias("model_version"))


class Learner:
    """``model-updates``' per-batch function: ``learn`` with the run's store and settings."""

    def __init__(self, store: ModelStore, refit_every: int, window: int, fit: Callable[[DataFrame], Any] | None = None):
        self.store, self.refit_every, self.window, self.fit = store, refit_every, window, fit

    def __call__(self, rows: DataFrame, batch_id: int) -> DataFrame:
        return learn(rows, batch_id, self.store, self.refit_every, self.window, self.fit)


def _profiles(spark: Any, path: str) -> DataFrame:
    """The card profiles in ``spark`` (each micro-batch's own session), their rows read once per path:
    pinned, the same for every batch. Made from Python rows, not Arrow: reading an Arrow stream in a
    streaming query's own thread overflowed its stack."""
    from speedlayer.pipelines.tables import reference_table

    if path not in _PROFILES:
        table = reference_table(spark, path, "parquet", name=f"card-profile table {path}")
        _PROFILES[path] = ([tuple(r) for r in table.collect()], table.schema)
    rows, schema = _PROFILES[path]
    return spark.createDataFrame(rows, schema)
