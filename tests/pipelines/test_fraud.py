"""fraud: train in batch on generated history, refuse a missing/foreign model before start, score a stream."""

import json
from datetime import datetime, timedelta

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.fraud.model import labelled, train
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sources import open_source
from tests.helpers import batch_output

GENERATOR = "generator://?kind=transactions&seed=9&cards=200&fraud=0.05&start=2026-11-22T10:00:00Z&rate=100"


@pytest.fixture(scope="module")
def model(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("fraud") / "model"
    # few iterations: each is a Spark job, and a small history converges early
    meta = train(spark, str(directory), GENERATOR, events=5000, holdout=3000, max_iter=15)
    return directory, meta


def test_training_learns_the_fraud_patterns(model):
    directory, meta = model
    held = meta["holdout"]
    assert held["frauds"] > 100
    assert held["precision"] > 0.8 and held["recall"] > 0.5 and held["roc_auc"] > 0.9, held
    assert json.loads((directory / "speedlayer-model.json").read_text())["history"]["cards"] == 200


def test_a_missing_or_foreign_model_is_refused_before_start(tmp_path):
    with pytest.raises(ConfigError, match=r"no fraud model at .*: train one first: speedlayer train fraud --model") as err:
        plan_run(RunSettings(job="fraud", options={"model": str(tmp_path / "nothing")}))
    assert "\n" not in str(err.value)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "speedlayer-model.json").write_text('{"job": "fraud", "format": 0, "features": []}')
    with pytest.raises(ConfigError, match="made for another job or version"):
        plan_run(RunSettings(job="fraud", options={"model": str(tmp_path / "other")}))
    with pytest.raises(ConfigError, match="job fraud option 'threshold'"):
        plan_run(RunSettings(job="fraud", options={"model": str(tmp_path / "other"), "threshold": "2"}))
    with pytest.raises(ConfigError, match="job fraud option 'learner'.*'refit' or 'incremental'"):
        plan_run(RunSettings(job="fraud", options={"model": str(tmp_path / "other"), "learner": "sgd"}))


def test_labels_given_in_part_take_the_rest_from_the_transactions(model):
    directory, _ = model
    settings = RunSettings(job="fraud", source=GENERATOR, options={"model": str(directory)},
                           inputs={"labels": "generator://?kind=labels&label_delay=30s&seed=4"}, sinks={"verdicts": "console:"})
    labels = plan_run(settings).inputs["labels"].options
    # its own delay and seed; the transactions' rate, cards and fraud share, so that the labels tell their truth
    assert (labels.label_delay, labels.seed, labels.rate, labels.cards, labels.fraud) == ("30s", 4, 100, 200, 0.05)


def test_learning_settings_without_learning_and_a_sink_that_cannot_take_scores_are_refused(model):
    directory, _ = model
    with pytest.raises(ConfigError, match=r"^job fraud option 'learner': only a learning run uses it: add "
                                          r"--option learn=true \(got 'incremental'\)$"):
        plan_run(RunSettings(job="fraud", source=GENERATOR, options={"model": str(directory), "learner": "incremental"}))
    learning = {"model": str(directory), "learn": "true"}
    with pytest.raises(ConfigError, match=r"^output 'scores' is computed per micro-batch .* parquet: cannot take: "
                                          r"write it to console:, postgresql:, mysql:, redis:, kafka:, delta:"):
        plan_run(RunSettings(job="fraud", source=GENERATOR, options=learning, sinks={"scores": "parquet:/tmp/nowhere"}))


def test_model_updates_without_learning_is_refused_in_one_line(model):
    directory, _ = model
    settings = RunSettings(job="fraud", source=GENERATOR, options={"model": str(directory)},
                           sinks={"model-updates": "console:"})
    with pytest.raises(ConfigError, match=r"^output 'model-updates' is the learning model's: run with "
                                          r"--option learn=true$"):
        plan_run(settings)


def test_the_stream_scores_like_the_batch_and_alerts_catch_fraud(spark, model, tmp_path):
    directory, _ = model
    settings = RunSettings(job="fraud", source=f"{GENERATOR}&rows_per_batch=1000", max_events=2000,
                           state_dir=str(tmp_path / "state"), options={"model": str(directory), "threshold": "0.5"},
                           sinks={"alerts": "memory:fraud_alerts"})
    summary = Run(spark, plan_run(settings)).start_and_wait()
    assert summary.stopped_by == "--max-events 2000"
    alerts = spark.table("fraud_alerts")
    assertDataFrameEqual(alerts, batch_output(spark, settings, "alerts"), rtol=1e-9)
    truth = labelled(spark, GENERATOR, 0, 2000).select("tx_id", "is_fraud")
    hits = alerts.join(truth, "tx_id").agg(F.count(F.lit(1)).alias("n"), F.sum("is_fraud").alias("fraud")).first()
    assert hits.n > 20 and hits.fraud / hits.n > 0.8
    assert alerts.where("fraud_score < 0.5 or home_country is null").count() == 0


def test_verdicts_join_each_score_to_the_label_that_came_later_and_bad_labels_are_dead_letters(spark, model, tmp_path):
    directory, _ = model
    # late=0: a label behind the watermark is dropped like any late event, and the oracle does not keep time
    source = f"{GENERATOR}&rows_per_batch=1000&late=0"
    labels_uri = (GENERATOR.replace("kind=transactions", "kind=labels")
                  + "&label_delay=5s&rows_per_batch=1000&late=0&unknown=0.03&duplicates=0.03&malformed=0.01")
    settings = RunSettings(job="fraud", source=source, max_events=3000, watermark="3s",
                           inputs={"labels": labels_uri}, state_dir=str(tmp_path / "state"),
                           options={"model": str(directory)},
                           sinks={"verdicts": "memory:fraud_verdicts", "scores": "memory:fraud_verdict_scores",
                                  "label-dead-letters": "memory:fraud_label_dead_letters"})
    Run(spark, plan_run(settings)).start_and_wait()
    # the oracle: the labels' payloads, read apart from the job and parsed in Python, against the scores written
    raw_labels = sorted(open_source(labels_uri).read_batch(spark, 3000).select("value", "offset").collect(),
                        key=lambda r: int(r.offset))
    labels = [(r.offset, _parsed(r.value, {"tx_id": str, "is_fraud": bool, "labelled_at": str})) for r in raw_labels]
    told = {}
    for _, label in labels:
        if label is not None:
            told.setdefault(label["tx_id"], label["is_fraud"])
    scored = {r.tx_id: r.fraud_score for r in spark.table("fraud_verdict_scores").collect()}
    verdicts = {r.tx_id: (r.is_fraud, r.fraud_score) for r in spark.table("fraud_verdicts").collect()}
    expected = {tx: (fraud, scored[tx]) for tx, fraud in told.items() if tx in scored}
    assert len(expected) > 1000 and verdicts == expected
    assert sum(fraud for fraud, _ in verdicts.values()) > 50  # 5% fraud: verdicts of both kinds came

    # each bad label is a dead letter with its reason, and nothing else is one
    paid = {}
    for r in open_source(source).read_batch(spark, 3000).select("value").collect():
        tx = _parsed(r.value, {"tx_id": str, "card_id": str, "time": str, "amount": (int, float),
                               "merchant_category": str, "country": str})
        if tx is not None and 0 <= tx["amount"] <= 1_000_000:
            paid.setdefault(tx["tx_id"], []).append(_at(tx["time"]))
    # unmatched labels are known once the watermark (3 s behind both streams' newest) has passed them
    decided = max(_at(label["labelled_at"]) for _, label in labels if label) - timedelta(seconds=4)
    bad, first = {}, {}
    for offset, label in labels:
        if label is None:
            bad[offset] = "malformed"
        elif label["tx_id"] in first:
            bad[offset] = f"a second label for {label['tx_id']} (the first, offset {first[label['tx_id']]}, counts)"
        else:
            first[label["tx_id"]] = offset
            at = _at(label["labelled_at"])
            if not any(at - timedelta(hours=1) <= t <= at for t in paid.get(label["tx_id"], [])):
                bad[offset] = f"no transaction {label['tx_id']} within 1h before the label" if at < decided else "later"
    dead = {r.offset: r.reason for r in spark.table("fraud_label_dead_letters").collect()}
    assert len(dead) == len(set(dead)) and set(dead) <= set(bad)
    assert {o: r for o, r in dead.items() if bad[o] not in ("malformed", "later")} == {
        o: r for o, r in bad.items() if r not in ("malformed", "later")}
    assert {o for o, r in bad.items() if r == "malformed"} <= set(dead)
    reasons = [r.split(" ")[0] for r in bad.values()]
    assert reasons.count("a") > 30 and reasons.count("no") > 30 and reasons.count("malformed") > 10, reasons


def _parsed(payload: str, fields: dict) -> dict | None:
    """A payload's JSON object when it has every field with its type, else None (plain Python: the oracle's)."""
    try:
        record = json.loads(payload)
    except ValueError:
        return None
    ok = isinstance(record, dict) and all(isinstance(record.get(f), kinds) for f, kinds in fields.items())
    return record if ok and not isinstance(record.get("amount", 0), bool) else None


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _auc(pairs: list[tuple[float, bool]]) -> float:
    """ROC AUC by counting: the share of (fraud, genuine) pairs the score orders right, ties half."""
    frauds = [s for s, f in pairs if f]
    genuine = [s for s, f in pairs if not f]
    wins = sum((a > b) + 0.5 * (a == b) for a in frauds for b in genuine)
    return wins / (len(frauds) * len(genuine))


class _FailsFirst:
    """A pipeline whose fit raises while ``failures`` is empty (noting the failure there), then fits as ``pipeline``."""

    def __init__(self, pipeline, failures: list):
        self.pipeline, self.failures = pipeline, failures

    def fit(self, rows):
        if not self.failures:
            self.failures.append("injected")
            raise ValueError("injected: the first refit fails")
        return self.pipeline.fit(rows)


def test_a_learning_run_refits_after_the_drift_and_ranks_the_new_fraud_better(spark, model, tmp_path, monkeypatch):
    from speedlayer.pipelines.fraud import learning
    from speedlayer.pipelines.fraud.learning import ModelStore
    from speedlayer.pipelines.fraud.model import score
    from speedlayer.testing import CollectSink

    directory, _ = model
    # the run's first refit raises inside its micro-batch: the query goes on and the next refit is made
    fitting, failures = learning.fraud_pipeline, []
    monkeypatch.setattr(learning, "fraud_pipeline", lambda max_iter=100: _FailsFirst(fitting(max_iter), failures))
    drifting = f"{GENERATOR}&rows_per_batch=1000&drift=10s&late=0"
    labels_uri = drifting.replace("kind=transactions", "kind=labels") + "&label_delay=5s"
    updates = CollectSink()
    settings = RunSettings(job="fraud", source=drifting, max_events=5000, inputs={"labels": labels_uri},
                           state_dir=str(tmp_path / "state"),
                           options={"model": str(directory), "learn": "true", "refit_every": "1000",
                                    "learn_window": "2000"})
    Run(spark, plan_run(settings, sinks={"model-updates": updates})).start_and_wait()

    tried = sorted((r.asDict() for r in updates.frame(spark).collect()), key=lambda t: t["at_batch"])
    assert failures and (tried[0]["accepted"], tried[0]["roc_auc"], tried[0]["version"]) == (False, None, "v0"), tried
    kept = [t for t in tried if t["accepted"]]
    assert kept and all(t["roc_auc"] >= t["previous_roc_auc"] for t in kept), tried
    assert all(t["version"] == t["previous"] for t in tried if not t["accepted"])  # a worse fit is not swapped in
    # a restart's store serves the newest version; on payments after the drift it ranks fraud better than
    # the frozen model, counted here against the generator's truth
    store = ModelStore(tmp_path / "state" / "models", directory)
    name, learned = store.model()
    assert name == kept[-1]["version"]
    later = labelled(spark, drifting, 5000, 7000)
    profiles = spark.read.parquet(str(directory / "profiles"))
    truth = {r.tx_id: bool(r.is_fraud) for r in later.collect()}

    def ranked(model_) -> float:
        return _auc([(r.fraud_score, truth[r.tx_id]) for r in score(later.drop("is_fraud"), model_, profiles).collect()])

    frozen = ModelStore(tmp_path / "none", directory).model()[1]
    assert ranked(learned) > 0.9 > ranked(frozen)


def test_the_labelled_history_counts_a_replay_once_and_a_failed_or_worse_refit_keeps_the_version(
        spark, model, tmp_path, caplog):
    from speedlayer.pipelines.fraud.learning import ModelStore, learn

    directory, _ = model
    store = ModelStore(tmp_path / "models", directory)
    verdicts = labelled(spark, GENERATOR, 0, 700).select(
        "*", F.lit("DE").alias("home_country"), F.lit(50.0).alias("avg_amount"),
        F.col("time").alias("labelled_at"))
    rows = verdicts.collect()

    def tried(number: int, fit=None) -> list:  # verdict batches of 100 transactions each
        batch = spark.createDataFrame(rows[number * 100:(number + 1) * 100], verdicts.schema)
        return learn(batch, number, store, refit_every=250, window=100, fit=fit).collect()

    with caplog.at_level("WARNING", logger="speedlayer.pipelines"):
        assert [tried(0), tried(1), tried(1)] == [[], [], []]  # 200 labels: the replay of batch 1 is not counted again
        [worse] = tried(2)  # the 300th label: a refit, worse than the trained model on these 20 held-out labels
    # a refit worse than the current version: a row not accepted, one line, the version stays
    assert (worse.accepted, worse.version, worse.previous) == (False, "v0", "v0")
    assert worse.roc_auc < worse.previous_roc_auc and store.current()[0] == "v0"
    for number in range(3, 5):
        tried(number)
    kept = spark.read.parquet(str(tmp_path / "models" / "labelled"))
    assert kept.select("tx_id").distinct().count() == 200  # the newest two windows, the older batches deleted
    assert {r.batch for r in kept.select("batch").distinct().collect()} == {3, 4}

    def broken(_rows):
        raise ValueError("the fit did not converge\n(a Spark error's second line)")

    # a refit that fails: a row not accepted, one line, the version stays and the next batch goes on
    with caplog.at_level("WARNING", logger="speedlayer.pipelines"):
        [failed] = tried(5, broken)
    assert (failed.accepted, failed.roc_auc, failed.version, failed.previous) == (False, None, "v0", "v0")
    assert store.current()[0] == "v0" and tried(6) == []
    # a window larger than the labels at hand holds out a fifth of those, not of the window
    fresh = ModelStore(tmp_path / "fresh", directory)
    [first] = learn(spark.createDataFrame(rows[:300], verdicts.schema), 0, fresh, refit_every=250, window=20000).collect()
    assert (first.trained_on, first.held_out) == (240, 60), first
    assert [r.getMessage() for r in caplog.records] == [
        f"speedlayer: model refit at batch 2 kept v0: held-out ROC AUC {worse.roc_auc:.4f} < "
        f"{worse.previous_roc_auc:.4f}",
        "speedlayer: model refit at batch 5 failed (ValueError: the fit did not converge); v0 stays, the run goes on"]


def test_the_incremental_learner_steps_each_batch_and_a_replay_learns_the_same(spark, model, tmp_path, caplog):
    from speedlayer.pipelines.fraud.incremental import WEIGHTS, IncrementalLearner
    from speedlayer.pipelines.fraud.learning import ModelStore
    from speedlayer.pipelines.fraud.model import score

    directory, _ = model
    drifting = f"{GENERATOR}&drift=10s"  # fraud drifts from transaction 1,000 (rate 100)
    profiles = spark.read.parquet(str(directory / "profiles"))
    verdicts = (labelled(spark, drifting, 1000, 3250).join(profiles.select("card_id", "home_country", "avg_amount"),
                                                            "card_id", "left")
                .select("*", F.col("time").alias("labelled_at")).orderBy("tx_id"))
    rows = verdicts.collect()
    store = ModelStore(tmp_path / "models", directory)
    learner = IncrementalLearner(store, refit_every=500, passes=50, step=2.0)

    def taught(number: int) -> list:  # verdict batches of 250 labels each
        return learner(spark.createDataFrame(rows[number * 250:(number + 1) * 250], verdicts.schema), number).collect()

    with caplog.at_level("WARNING", logger="speedlayer.pipelines"):
        tried = [row for number in range(8) for row in taught(number)]
    # a version not swapped in says so in one line
    assert [r.getMessage() for r in caplog.records] == [
        f"speedlayer: model update at batch {t.at_batch} kept {t.previous}: ROC AUC {t.roc_auc:.4f} < "
        f"{t.previous_roc_auc:.4f} over the 500 labels since the last version" for t in tried if not t.accepted]
    # a version is tried every 500 labels, against the served one on labels neither had learned from
    assert [t.at_batch for t in tried] == [1, 3, 5, 7] and [t.held_out for t in tried] == [500] * 4, tried
    assert tried[0].accepted and tried[0].previous == "v0" and tried[0].roc_auc > tried[0].previous_roc_auc, tried
    assert all(t.accepted == (t.roc_auc >= t.previous_roc_auc) for t in tried)
    assert all(t.version == t.previous for t in tried if not t.accepted)
    # a replay: the version the batch made stands; a batch that made none learns the same weights again
    versions = sorted(p.name for p in store.root.glob("v*"))
    assert taught(1) == [tried[0]] and sorted(p.name for p in store.root.glob("v*")) == versions
    assert taught(8) == []
    weights = (store.root / WEIGHTS / "b000008.json").read_text()
    assert taught(8) == [] and (store.root / WEIGHTS / "b000008.json").read_text() == weights
    # the newest version ranks later drifted payments' fraud, against the generator's truth; the frozen model does not
    later = labelled(spark, drifting, 3250, 5250)
    truth = {r.tx_id: bool(r.is_fraud) for r in later.collect()}

    def ranked(model_) -> float:
        return _auc([(r.fraud_score, truth[r.tx_id]) for r in score(later.drop("is_fraud"), model_, profiles).collect()])

    assert ranked(store.model()[1]) > 0.9 > ranked(ModelStore(tmp_path / "none", directory).model()[1])


def test_the_scores_take_a_new_version_at_their_next_batch(spark, model, tmp_path):
    from speedlayer.pipelines.fraud import ALERT_COLUMNS
    from speedlayer.pipelines.fraud.learning import ModelStore, Served
    from speedlayer.pipelines.fraud.model import fraud_pipeline, with_features

    directory, _ = model
    store = ModelStore(tmp_path / "models", directory)
    served = Served(store, str(directory / "profiles"), ALERT_COLUMNS)
    batch = labelled(spark, GENERATOR, 0, 300)
    assert {r.model_version for r in served(batch.drop("is_fraud"), 0).collect()} == {"v0"}
    history = labelled(spark, GENERATOR, 300, 3000).select("*", F.lit("DE").alias("home_country"),
                                                            F.lit(50.0).alias("avg_amount"))
    name = store.publish(1, fraud_pipeline(max_iter=5).fit(with_features(history)), {"labels_seen": 2700})
    again = served(batch.drop("is_fraud"), 2).collect()
    assert {r.model_version for r in again} == {name} and len(again) == batch.count()
