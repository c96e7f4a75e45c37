"""``--option learner=incremental``: the model's logistic regression taught by every micro-batch of labels.

Each micro-batch of verdicts (payments with their labels) is first scored by the learner's weights
and by the version the scores are served from, neither of which has learned from it (test, then
train), and then the weights take ``passes`` steps of gradient descent over it (numpy, on the
driver: a micro-batch's labels are few). Once ``refit_every`` labels have come since the last
version, the weights become a version, in the same store and with the same ``model-updates`` row as
a refit's, when their ROC AUC over those labels (scored before they were learned from) is at least
the served version's. The features are the trained pipeline's, unchanged; only the regression's
weights move. The weights after each micro-batch are kept (``incremental/b<batch>.json``), so a
replayed batch starts from its predecessor's and learns the same.

>>> IncrementalLearner(store, refit_every=2000, passes=50, step=2.0)(verdict_rows, 7)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from speedlayer.pipelines.fraud.learning import UPDATE_SCHEMA, ModelStore, replace_file, replayed, update_row
from speedlayer.pipelines.fraud.model import with_features

log = logging.getLogger("speedlayer.pipelines")
#: the learner's weights and pending test scores after each micro-batch, under the model store
WEIGHTS = "incremental"
#: L2 penalty of each step, as the trained regression's regParam
PENALTY = 0.001
#: the test scores and labels of the labels since the last version, when there are none
_NOTHING_PENDING = {"running": [], "served": [], "truth": []}


def roc_auc(scores: np.ndarray, truth: np.ndarray) -> float | None:
    """ROC AUC by ranks (ties averaged); None when only one class is present.

    >>> roc_auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([False, False, True, True]))
    0.75
    """
    positives = int(truth.sum())
    negatives = len(truth) - positives
    if not positives or not negatives:
        return None
    order = np.argsort(scores, kind="stable")
    ordered = scores[order]
    starts = np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1]
    ends = np.r_[starts[1:], len(scores)]
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat((starts + ends + 1) / 2, ends - starts)
    return float((ranks[truth].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def sgd(x: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, passes: int, step: float) -> tuple[np.ndarray, float]:
    """``passes`` full-batch gradient steps of L2-penalised logistic regression over (x, y) from (w, b).

    >>> w, b = sgd(np.array([[1.0], [-1.0]]), np.array([1.0, 0.0]), np.zeros(1), 0.0, 20, 1.0)
    >>> bool(w[0] > 1)
    True
    """
    for _ in range(passes):
        p = _sigmoid(x @ w + b)
        w = w - step * (x.T @ (p - y) / len(y) + PENALTY * w)
        b = b - step * float(np.mean(p - y))
    return w, b


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-np.clip(z, -30, 30)))


class IncrementalLearner:
    """``model-updates``' per-batch function with ``learner=incremental``."""

    def __init__(self, store: ModelStore, refit_every: int, passes: int, step: float):
        self.store, self.refit_every, self.passes, self.step = store, refit_every, passes, step

    def __call__(self, rows: DataFrame, batch_id: int) -> DataFrame:
        spark = rows.sparkSession
        if rows.isEmpty():
            return spark.createDataFrame([], UPDATE_SCHEMA)
        made = self.store.made_at(batch_id)
        if made is not None:  # a replay: the version this batch made stands
            return replayed(spark, made)
        current, model = self.store.model()
        state = self._state_before(batch_id, model)
        x, y, served = _tested(model, rows)
        w, b = np.array(state["w"]), state["b"]
        pending = {"running": state["running"] + _sigmoid(x @ w + b).tolist(), "served": state["served"] + served.tolist(),
                   "truth": state["truth"] + y.tolist()}
        w, b = sgd(x, y, w, b, self.passes, self.step)
        seen = state["seen"] + len(y)
        due = seen - state["since"] >= self.refit_every
        record = self._tried(batch_id, current, model, w, b, pending, seen) if due else None
        if record is None:
            self._keep(batch_id, {"w": w.tolist(), "b": b, "seen": seen, "since": state["since"], **pending})
            return spark.createDataFrame([], UPDATE_SCHEMA)
        self._keep(batch_id, {"w": w.tolist(), "b": b, "seen": seen, "since": seen, **_NOTHING_PENDING})
        return update_row(spark, record)

    def _tried(self, batch_id: int, current: str, model: Any, w: np.ndarray, b: float, pending: dict,
               seen: int) -> dict[str, Any] | None:
        """The version the weights make if they ranked the labels since the last one at least as well as the
        served version did; None while those labels are of one class only (nothing to rank yet)."""
        truth = np.array(pending["truth"], dtype=bool)
        auc = roc_auc(np.array(pending["running"]), truth)
        before = roc_auc(np.array(pending["served"]), truth)
        if auc is None or before is None:
            return None
        auc, before = round(auc, 4), round(before, 4)
        record = {"at_batch": batch_id, "trained_on": seen, "held_out": len(truth), "roc_auc": auc, "previous": current,
                  "previous_roc_auc": before, "accepted": auc >= before, "labels_seen": seen, "version": current}
        if record["accepted"]:
            record["version"] = self.store.publish(batch_id, _with_weights(model, w, b), record)
        else:
            log.warning("speedlayer: model update at batch %d kept %s: ROC AUC %.4f < %.4f over the %d labels since "
                        "the last version", batch_id, current, auc, before, len(truth))
        return record

    def _state_before(self, batch_id: int, model: Any) -> dict[str, Any]:
        """The weights and pending test scores after the newest batch before ``batch_id``; the served model's
        regression and nothing pending before the first."""
        before = self._kept_before(batch_id)
        if before:
            return json.loads(before[-1].read_text())
        regression = model.stages[-1]
        return {"w": regression.coefficients.toArray().tolist(), "b": float(regression.intercept), "seen": 0, "since": 0,
                **_NOTHING_PENDING}

    def _keep(self, batch_id: int, state: dict[str, Any]) -> None:
        """Keep the state after ``batch_id``, and the one before it (a replay of this batch starts there)."""
        root = self._root()
        root.mkdir(parents=True, exist_ok=True)
        replace_file(root / f"b{batch_id:06d}.json", json.dumps(state))
        for old in self._kept_before(batch_id)[:-1]:
            old.unlink(missing_ok=True)

    def _kept_before(self, batch_id: int) -> list[Path]:
        """The kept states of the batches before ``batch_id``, oldest first."""
        kept = [p for p in self._root().glob("b*.json") if int(p.stem[1:]) < batch_id]
        return sorted(kept, key=lambda p: int(p.stem[1:]))

    def _root(self) -> Path:
        return self.store.root / WEIGHTS


def _tested(model: Any, rows: DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch's feature vectors, labels and the served model's scores, in ``tx_id`` order (a replay's order).
    Collected as rows, not Arrow: an Arrow stream read in a streaming query's own thread overflowed its stack
    (see ``learning._profiles``); a micro-batch's labels are few."""
    from pyspark.ml.functions import vector_to_array

    scored = model.transform(with_features(rows)).select(
        "tx_id", vector_to_array("features").alias("x"), F.col("is_fraud").cast("double").alias("y"),
        vector_to_array("probability")[1].alias("p")).orderBy("tx_id").collect()
    return (np.array([r.x for r in scored]), np.array([r.y for r in scored]), np.array([r.p for r in scored]))


def _with_weights(model: Any, w: np.ndarray, b: float) -> Any:
    """``model`` (a fitted pipeline ending in a logistic regression) with the regression's weights replaced."""
    from pyspark import SparkContext
    from pyspark.ml import PipelineModel
    from pyspark.ml.classification import LogisticRegressionModel
    from pyspark.ml.common import _py2java
    from pyspark.ml.linalg import Vectors

    template, context = model.stages[-1], SparkContext._active_spark_context
    # Spark's own constructor of a binary model from its coefficients and intercept
    java = context._jvm.org.apache.spark.ml.classification.LogisticRegressionModel(
        template.uid, _py2java(context, Vectors.dense(w)), float(b))
    regression = LogisticRegressionModel(java)
    regression.setFeaturesCol(template.getFeaturesCol()).setProbabilityCol(template.getProbabilityCol())
    return PipelineModel(stages=[*model.stages[:-1], regression])
