"""Learning fraud runs as a user starts them, live: what their scores served over time after a drift.

    .venv/bin/python bench/fraud_learning_live.py                   # ~14 min on 2 cores: two runs of 5 minutes
    .venv/bin/python bench/fraud_learning_live.py --learners incremental --minutes 10 --drift 3min

``bench/fraud_learning.py`` compares learners on one replayed stream; this one runs the product. It
trains a model with ``speedlayer train fraud`` (the generator's defaults: undrifted history), then,
once per learner (``--learners``), runs ``speedlayer run fraud --option learn=true`` from the CLI
for ``--minutes`` on a paced generator (``--rate`` payments a second, the fraud pattern drifting
``--drift`` after the start), its labels ``--label-delay`` after their payments (``--labels
'generator://?kind=labels&label_delay=...'``, the rest taken from the transactions), ``scores`` and
``model-updates`` into Delta tables. After each run it reads what ``scores`` committed, each payment
with the ``model_version`` that scored it, and measures ROC AUC per ``--chunk`` of event time against
the generator's truth: of the served scores, and of the frozen model (``v0``) scoring the same
payments in batch.

The table and series go to ``bench/results/fraud_learning_live.json``, the plot to the docs,
``docs/fraud-learning-live.svg`` (``--plot`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from speedlayer.pipelines.fraud.incremental import roc_auc

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from fraud_learning import plot  # noqa: E402

SPEEDLAYER = str(Path(sys.executable).with_name("speedlayer"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--learners", default="refit,incremental", help="one run per learner (default refit,incremental)")
    p.add_argument("--minutes", type=float, default=5, help="how long each run goes (default 5)")
    p.add_argument("--rate", type=int, default=200, help="payments a second (default 200)")
    p.add_argument("--drift", default="90s", help="event time after the start from which fraud drifts (default 90s)")
    p.add_argument("--label-delay", default="20s", help="how long after its payment a label comes (default 20s)")
    p.add_argument("--refit-every", type=int, default=2000, help="labels between refits (default 2,000)")
    p.add_argument("--learn-window", type=int, default=6000, help="newest labels a refit learns from (default 6,000)")
    p.add_argument("--chunk", type=int, default=15, help="seconds of payments per ROC AUC point (default 15)")
    p.add_argument("--out", type=Path, default=BENCH / "results" / "fraud_learning_live.json")
    p.add_argument("--plot", type=Path, default=BENCH.parent / "docs" / "fraud-learning-live.svg")
    return p.parse_args(argv)


def run_cli(command: list[str], log: Path) -> float:
    """Run a speedlayer command to its end, its output in ``log``; its seconds. A failure stops the bench."""
    print("$ " + shlex.join(command), flush=True)
    began = time.monotonic()
    with log.open("w") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode
    if code:
        sys.exit(f"speedlayer exited {code}: see {log}")
    return time.monotonic() - began


def served_and_frozen(work: Path, uri: str, model_dir: Path) -> tuple[list, dict[str, float], int]:
    """The committed scores (tx_id, fraud_score, model_version, truth), the frozen model's score of each, and how
    many scores were committed."""
    from pyspark.ml import PipelineModel

    from speedlayer.pipelines.fraud.model import labelled, score
    from speedlayer.runtime.session import tool_session
    from speedlayer.sinks.delta import delta_conf, delta_package

    spark = tool_session("bench-fraud-live", cores=2, packages=[delta_package()], connector_conf=delta_conf())
    served = spark.read.format("delta").load(str(work / "scores")).select("tx_id", "fraud_score", "model_version")
    rows = served.collect()
    payments = labelled(spark, uri, 0, max(int(r.tx_id[2:]) for r in rows) + 1)
    frozen = score(payments.drop("is_fraud"), PipelineModel.load(str(model_dir / "pipeline")),
                   spark.read.parquet(str(model_dir / "profiles"))).join(payments.select("tx_id", "is_fraud"), "tx_id")
    found = frozen.select("tx_id", "fraud_score", "is_fraud").collect()  # one pass: the frozen score and the truth
    by_frozen = {r.tx_id: r.fraud_score for r in found}
    truth = {r.tx_id: bool(r.is_fraud) for r in found}
    spark.stop()
    # a re-send of a re-sent row carries an id no new payment had: no truth, left out (counted in the results)
    return ([(r.tx_id, r.fraud_score, r.model_version, truth[r.tx_id]) for r in rows if r.tx_id in truth], by_frozen,
            len(rows))


def per_chunk(runs: dict[str, list], by_frozen: dict[str, float], per_chunk_tx: int, rate: int) -> list[dict]:
    """ROC AUC per chunk of payments: the frozen model's, and each run's served scores with the versions that served."""
    table = []
    first_run = next(iter(runs.values()))
    end = max(int(r[0][2:]) for rows in runs.values() for r in rows) + 1
    for first in range(0, end, per_chunk_tx):
        row: dict = {"first": first, "seconds": f"{first // rate}-{(first + per_chunk_tx) // rate}"}
        chunk = [r for r in first_run if first <= int(r[0][2:]) < first + per_chunk_tx]
        row["frozen"] = _auc([by_frozen[r[0]] for r in chunk], [r[3] for r in chunk])
        row["fraud"] = sum(r[3] for r in chunk)
        for learner, rows in runs.items():
            chunk = [r for r in rows if first <= int(r[0][2:]) < first + per_chunk_tx]
            row[learner] = _auc([r[1] for r in chunk], [r[3] for r in chunk])
            row[f"{learner} versions"] = sorted({r[2] for r in chunk})
        table.append(row)
    return table


def _auc(scores: list[float], truth: list[bool]) -> float | None:
    auc = roc_auc(np.array(scores), np.array(truth, dtype=bool)) if scores else None
    return None if auc is None else round(auc, 3)


def learning_run(learner: str, args: argparse.Namespace, model_dir: Path, work: Path) -> dict:
    """One CLI run with ``learner``: its command, seconds, scores and the versions it made."""
    source = f"generator://?kind=transactions&rate={args.rate}&drift={args.drift}"
    labels = f"generator://?kind=labels&label_delay={args.label_delay}"
    run = [SPEEDLAYER, "run", "fraud", "--option", f"model={model_dir}", "--option", "learn=true",
           "--option", f"learner={learner}", "--option", f"refit_every={args.refit_every}",
           "--option", f"learn_window={args.learn_window}", "--source", source, "--labels", labels,
           "--state-dir", str(work / "state"), "--sink", f"scores=delta:{work / 'scores'}",
           "--sink", f"model-updates=delta:{work / 'updates'}", "--duration", f"{args.minutes * 60:g}s", "--no-dashboard"]
    work.mkdir(parents=True, exist_ok=True)
    seconds = run_cli(run, work / "run.log")
    state = json.loads((work / "state" / "speedlayer-run.json").read_text())["run_state"]
    versions = [json.loads(p.read_text()) for p in sorted((work / "state" / "models").glob("v*/version.json"))]
    return {"command": shlex.join(run), "seconds": round(seconds, 1),
            "uri": f"{source}&start={state['generator_start_ms']}", "work": work,
            "versions": [{k: v.get(k) for k in ("version", "at_batch", "trained_on", "held_out", "roc_auc",
                                                "previous_roc_auc")} for v in versions]}


def main(argv: list[str] | None = None) -> dict:
    from speedlayer.core.durations import parse_duration

    args = parse_args(argv)
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="speedlayer-fraud-live-"))
    model_dir = work / "model"
    train_s = run_cli([SPEEDLAYER, "train", "fraud", "--model", str(model_dir), "--events", "20000",
                       "--holdout", "5000"], work / "train.log")
    learners = args.learners.split(",")
    runs = {learner: learning_run(learner, args, model_dir, work / learner) for learner in learners}
    scored, by_frozen = {}, {}
    for learner, run in runs.items():
        scored[learner], frozen, run["committed"] = served_and_frozen(run["work"], run["uri"], model_dir)
        by_frozen.update(frozen)
    drift_at = parse_duration(args.drift) * args.rate // 1000
    table = per_chunk(scored, by_frozen, args.chunk * args.rate, args.rate)
    results = {
        "benchmark": "fraud: learning runs, live, after a drift",
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": {"cores": os.cpu_count(), "loadavg": os.getloadavg(), "python": platform.python_version()},
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "train_s": round(train_s, 1), "drift_at": drift_at,
        "runs": {learner: {**{k: v for k, v in run.items() if k != "work"}, "scored": len(scored[learner]),
                           "left_out": run["committed"] - len(scored[learner])}
                 for learner, run in runs.items()},
        "per_chunk": table, "seconds": round(time.monotonic() - began, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    plot([{**r, "first": r["first"] / args.rate} for r in table], ["frozen", *learners], drift_at / args.rate,
         args.chunk, args.plot, xlabel=f"seconds of payments (ROC AUC per {args.chunk} s, against the generator's truth)")
    print(f"{'seconds':>9} {'fraud':>6} {'frozen':>7} " + " ".join(f"{n:>12}" for n in learners) + "  versions")
    for r in table:
        print(f"{r['seconds']:>9} {r['fraud']:>6} {_shown(r['frozen']):>7} "
              + " ".join(f"{_shown(r[n]):>12}" for n in learners)
              + "  " + "; ".join(", ".join(r[f"{n} versions"]) for n in learners))
    for learner, run in results["runs"].items():
        print(f"{learner}: {len(run['versions'])} versions made, {run['scored']:,} payments scored "
              f"({run['left_out']} left out), run {run['seconds']} s")
    print(f"{results['seconds']} s in all; results in {args.out}, plot in {args.plot}")
    shutil.rmtree(work, ignore_errors=True)
    return results


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()
