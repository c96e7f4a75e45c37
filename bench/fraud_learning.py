"""Fraud after a drift: the frozen model, the learning run's sliding-window refits, and an incremental learner.

    .venv/bin/python bench/fraud_learning.py                  # ~4 min on 2 cores: 8,000 transactions
    .venv/bin/python bench/fraud_learning.py --events 20000 --refit-every 2000 --learn-window 4000

One drifting stream (``generator://?kind=transactions&seed=9&cards=200&fraud=0.05&rate=100``, fraud
changes its pattern after ``--drift-after`` transactions) with its labels ``--label-delay`` later. A
model is trained first on the undrifted history (``speedlayer.pipelines.fraud.model.train``, 5,000
transactions). Then, over the same transactions, ROC AUC per ``--chunk`` (1,000) transactions against
the generator's truth, for:

- **frozen**: the trained model, never updated (scored in batch: the stream's scores equal the
  batch function's, ``tests/pipelines/test_fraud.py``);
- **refits**: ``speedlayer run fraud --option learn=true`` in this process, micro-batches of
  ``--rows-per-batch``, ``model-updates`` refitting every ``--refit-every`` labels on the newest
  ``--learn-window``; each micro-batch of transactions scored by the version the refits had made
  before it (v0 before the first), which is what ``scores`` serves when the refits keep up. (In this
  unpaced run the ``scores`` query would finish its batches before the refits' slower batches: the
  versions it served would measure that race, not the models.)
- **incremental**: a logistic regression on the same features (the trained pipeline's assembler),
  starting from the frozen model's coefficients, that scores each micro-batch's transactions and
  then takes a few SGD passes over the labels that arrived in that micro-batch (numpy; simulated
  here, outside Spark, on the same arrival order the run has: label ``n`` is about transaction
  ``n - delay x rate``).

The table and the series go to ``bench/results/fraud_learning.json``, the plot to the docs,
``docs/fraud-learning.svg`` (``--plot`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from speedlayer.pipelines.fraud.incremental import roc_auc, sgd

BENCH = Path(__file__).resolve().parent
GENERATOR = "generator://?kind=transactions&seed=9&cards=200&fraud=0.05&start=2026-11-22T10:00:00Z&rate=100"


def features(frozen, transactions, profiles) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The trained pipeline's feature vectors (all stages but the regression), the truth and the tx ids, in tx order."""
    from pyspark.ml import PipelineModel
    from pyspark.ml.functions import vector_to_array

    from speedlayer.pipelines.fraud.model import card_features

    assemble = PipelineModel(stages=frozen.stages[:-1])
    rows = (assemble.transform(card_features(transactions, profiles))
            .select("tx_id", vector_to_array("features").alias("x"), "is_fraud").orderBy("tx_id").collect())
    return (np.array([r.x for r in rows]), np.array([bool(r.is_fraud) for r in rows]), [r.tx_id for r in rows])


def incremental(x: np.ndarray, y: np.ndarray, numbers: np.ndarray, w: np.ndarray, b: float, batch: int, lag: int,
                passes: int, rate: float) -> np.ndarray:
    """Scores of each micro-batch (``batch`` transaction numbers) by the weights as they stood before it, then
    ``learner=incremental``'s steps on the labels it brought: those of the transactions ``lag`` numbers earlier."""
    scores = np.empty(len(x))

    def at(number: int) -> int:  # the first row at or after a transaction number
        return int(np.searchsorted(numbers, number))

    for first in range(0, int(numbers.max()) + 1, batch):
        scores[at(first):at(first + batch)] = 1 / (1 + np.exp(-(x[at(first):at(first + batch)] @ w + b)))
        lo, hi = at(first - lag), at(first + batch - lag)
        if hi > lo:
            w, b = sgd(x[lo:hi], y[lo:hi], w, b, passes, rate)
    return scores


def learning_run(spark, args, model_dir: Path, uri: str, labels_uri: str, work: Path) -> tuple[list[dict], float]:
    """The learning run (``model-updates`` only): the refits tried, its seconds."""
    from speedlayer.core.errors import QueryFailedError
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings
    from speedlayer.testing import CollectSink

    updates = CollectSink()
    settings = RunSettings(job="fraud", source=uri, max_events=args.events, inputs={"labels": labels_uri},
                           state_dir=str(work / "state"),
                           options={"model": str(model_dir), "learn": "true", "refit_every": str(args.refit_every),
                                    "learn_window": str(args.learn_window)})
    began = time.monotonic()
    try:
        Run(spark, plan_run(settings, sinks={"model-updates": updates})).start_and_wait()
    except QueryFailedError as exc:
        if "failed while stopping" not in str(exc):
            raise
        # the bounded stop can interrupt Spark planning a flush batch (seen once, in a broadcast): the
        # refits made before it stand, and they are what is measured
        print(f"  {exc}".splitlines()[0][:300], flush=True)
    tried = [r.asDict() for r in updates.frame(spark).orderBy("at_batch").collect()]
    return tried, time.monotonic() - began


def served_by_refits(stream, frozen, profiles, tried: list[dict], models: Path, batch: int) -> dict[str, dict]:
    """Each transaction's score by each version; ``served``: by the version the refits had made before its
    micro-batch (v0, the frozen model, before the first), what the scores serve when the refits keep up."""
    from pyspark.ml import PipelineModel

    from speedlayer.pipelines.fraud.model import score

    made = [(t["at_batch"], t["version"]) for t in tried if t["accepted"]]
    wanted = stream.drop("is_fraud")
    scores = {"v0": {r.tx_id: r.fraud_score for r in score(wanted, frozen, profiles).collect()}}
    for _, version in made:
        model = PipelineModel.load(str(models / version / "pipeline"))
        scores[version] = {r.tx_id: r.fraud_score for r in score(wanted, model, profiles).collect()}
    scores["served"] = {}
    for tx_id in scores["v0"]:
        version = next((v for at, v in reversed(made) if at < int(tx_id[2:]) // batch), "v0")
        scores["served"][tx_id] = scores[version][tx_id]
    return scores


def chunks(ids: list[str], truth: np.ndarray, series: dict[str, np.ndarray], size: int) -> list[dict]:
    """ROC AUC of each series per ``size`` transactions (by transaction number)."""
    numbers = np.array([int(i[2:]) for i in ids])
    table = []
    for first in range(0, int(numbers.max()) + 1, size):
        at = (numbers >= first) & (numbers < first + size)
        row = {"transactions": f"{first:,}-{first + size - 1:,}", "first": first, "fraud": int(truth[at].sum()),
               "n": int(at.sum())}
        for name, scores in series.items():
            have = at & ~np.isnan(scores)
            auc = roc_auc(scores[have], truth[have]) if have.any() else None
            row[name] = None if auc is None else round(auc, 3)
        table.append(row)
    return table


def plot(table: list[dict], names: list[str], drift_after: float, size: int, path: Path, xlabel: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    for name, style in zip(names, ("-o", "-s", "-^")):
        points = [(r["first"] + size / 2, r[name]) for r in table if r[name] is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points], style, label=name, markersize=4, linewidth=1.2)
    ax.axvline(drift_after, color="grey", linestyle=":", linewidth=1)
    ax.text(drift_after, 0.02, " drift", color="grey", fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel or f"transaction number (ROC AUC per {size:,}, against the generator's truth)")
    ax.set_ylabel("ROC AUC")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=8000, help="transactions in the stream (default 8,000)")
    p.add_argument("--drift-after", type=int, default=1000, help="transactions before fraud drifts (default 1,000)")
    p.add_argument("--label-delay", type=int, default=500, help="transactions a label trails its payment by (500)")
    p.add_argument("--rows-per-batch", type=int, default=1000, help="events per micro-batch (default 1,000)")
    p.add_argument("--refit-every", type=int, default=1000, help="labels between refits (default 1,000)")
    p.add_argument("--learn-window", type=int, default=2000, help="newest labels a refit learns from (default 2,000)")
    p.add_argument("--chunk", type=int, default=1000, help="transactions per ROC AUC point (default 1,000)")
    p.add_argument("--sgd-passes", type=int, default=50, help="SGD passes over each micro-batch's labels (default 50)")
    p.add_argument("--sgd-rate", type=float, default=2.0, help="SGD step (default 2)")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "fraud_learning.json")
    p.add_argument("--plot", type=Path, default=BENCH.parent / "docs" / "fraud-learning.svg")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from pyspark.ml import PipelineModel

    from speedlayer.pipelines.fraud.model import labelled, train
    from speedlayer.runtime.session import build_session

    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="speedlayer-fraud-learning-"))
    spark = build_session("local[2]", {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
                          app_name="bench-fraud-learning", log_file=work / "spark.log")
    rate = 100
    uri = f"{GENERATOR}&rows_per_batch={args.rows_per_batch}&drift={args.drift_after * 1000 // rate}ms&late=0"
    labels_uri = (uri.replace("kind=transactions", "kind=labels") + f"&label_delay={args.label_delay * 1000 // rate}ms")
    model_dir = work / "model"
    trained = train(spark, str(model_dir), GENERATOR, events=5000, holdout=1000, max_iter=15)
    print(f"trained in {trained['seconds']} s: held-out ROC AUC {trained['holdout']['roc_auc']}", flush=True)

    tried, run_s = learning_run(spark, args, model_dir, uri, labels_uri, work)
    print(f"learning run: {len(tried)} refits tried in {run_s:.0f} s", flush=True)
    stream = labelled(spark, uri, 0, args.events).cache()
    profiles = spark.read.parquet(str(model_dir / "profiles"))
    frozen = PipelineModel.load(str(model_dir / "pipeline"))
    x, truth, ids = features(frozen, stream, profiles)  # in the stream's order: t-%08d sorts by number
    by_version = served_by_refits(stream, frozen, profiles, tried, work / "state" / "models", args.rows_per_batch)
    regression = frozen.stages[-1]
    numbers = np.array([int(i[2:]) for i in ids])
    stepped = incremental(x, truth.astype(float), numbers, regression.coefficients.toArray(), regression.intercept,
                      args.rows_per_batch, args.label_delay, args.sgd_passes, args.sgd_rate)
    series = {
        "frozen": np.array([by_version["v0"][i] for i in ids]),
        "refits": np.array([by_version["served"][i] for i in ids]),
        "incremental (SGD)": stepped,
    }
    table = chunks(ids, truth, series, args.chunk)
    # the chunks after the first micro-batch of drifted labels has been learned from
    after = [r for r in table if r["first"] >= args.drift_after + args.label_delay + args.rows_per_batch]
    means = {name: round(float(np.mean([r[name] for r in after if r[name] is not None])), 3) for name in series}
    results = {
        "benchmark": "fraud: frozen vs learning after a drift", "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cores": os.cpu_count(), "loadavg": os.getloadavg(), "python": platform.python_version()},
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "source": uri, "labels": labels_uri, "trained": trained["holdout"], "learning_run_s": round(run_s, 1),
        "refits": tried, "per_chunk": table, "mean_auc_after_drift": means,
        "mean_after_from": after[0]["first"] if after else None,
        "seconds": round(time.monotonic() - began, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    plot(table, list(series), args.drift_after, args.chunk, args.plot)
    print(f"{'transactions':>14} {'fraud':>6} " + " ".join(f"{n:>18}" for n in series))
    for r in table:
        print(f"{r['transactions']:>14} {r['fraud']:>6} " + " ".join(f"{r[n] if r[n] is not None else '-':>18}" for n in series))
    print(f"mean ROC AUC from transaction {results['mean_after_from']:,} on: {means}; "
          f"{results['seconds']} s in all; results in {args.out}, plot in {args.plot}")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    main()
