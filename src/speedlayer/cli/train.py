"""``speedlayer train``: fit a job's model in batch on generated history (fraud)."""

from __future__ import annotations

import typer

from speedlayer.cli.console import err, out
from speedlayer.core.errors import ConfigError


def train_command(
    job: str = typer.Argument(..., help="the job whose model to fit: fraud"),
    model: str = typer.Option("models/fraud", "--model", help="directory to save the model in (replaced)"),
    generator: str = typer.Option("generator://?kind=transactions", "--generator",
                                  help="labelled history: a generator://?kind=transactions URI (seed, cards, fraud)"),
    events: int = typer.Option(100_000, "--events", min=1000, help="transactions of history to fit on"),
    holdout: int = typer.Option(20_000, "--holdout", min=100, help="later transactions held out to measure precision/recall"),
    threshold: float = typer.Option(0.5, "--threshold", min=0.0, max=1.0, help="alert threshold the held-out figures are for"),
    master: str = typer.Option("local[*]", "--master", help="Spark master that trains"),
) -> None:
    """Fit a job's model in batch on generated history and save it (fraud: Spark ML pipeline + card profiles)."""
    if job != "fraud":
        raise ConfigError(f"no model to train for job {job!r}: only 'fraud' has one")
    import tempfile
    from pathlib import Path

    from speedlayer.core.uris import parse_uri
    from speedlayer.pipelines.fraud.model import train
    from speedlayer.runtime.session import build_session, check_java
    from speedlayer.sources.generator import GeneratorSource

    if GeneratorSource(parse_uri(generator, "--generator URI")).options.kind != "transactions":
        raise ConfigError("--generator must generate transactions: add kind=transactions")
    check_java()
    log_file = Path(tempfile.gettempdir()) / "speedlayer-train-spark.log"
    err.print(f"starting Spark ({master}); Spark's log: {log_file}", soft_wrap=True, markup=False)
    spark = build_session(master, {"spark.ui.enabled": "false"}, app_name="speedlayer-train", log_file=log_file)
    try:
        meta = train(spark, model, generator, events, holdout, threshold)
    finally:
        spark.stop()
    h = meta["holdout"]
    out.print(f"trained on {meta['history']['transactions']:,} transactions ({meta['history']['frauds']:,} fraud, "
              f"{meta['history']['cards']:,} card profiles) in {meta['seconds']}s; saved to {Path(model).resolve()}",
              soft_wrap=True, markup=False)
    out.print(f"held out {h['transactions']:,} later transactions ({h['frauds']:,} fraud): at threshold {h['threshold']:g} "
              f"precision {h['precision']:.3f}, recall {h['recall']:.3f}, ROC AUC {h['roc_auc']:.3f}",
              soft_wrap=True, markup=False)
