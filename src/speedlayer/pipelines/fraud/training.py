"""``speedlayer train fraud``: the fraud job's trainer, its settings and what it reports.

    speedlayer train fraud --model models/fraud --events 100000 --threshold 0.3
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, field_validator

from speedlayer.core.uris import parse_uri
from speedlayer.pipelines.base import Trainer


class FraudTraining(BaseModel):
    """The settings of ``speedlayer train fraud`` (``--model DIR``, ``--events N``, ...)."""

    model: str = Field("models/fraud", description="directory to save the model in (replaced)")
    generator: str = Field("generator://?kind=transactions",
                           description="labelled history: a generator://?kind=transactions URI (seed, cards, fraud)")
    events: int = Field(100_000, ge=1000, description="transactions of history to fit on")
    holdout: int = Field(20_000, ge=100, description="later transactions held out to measure precision/recall")
    threshold: float = Field(0.5, ge=0, le=1, description="alert threshold the held-out figures are for")

    @field_validator("generator")
    @classmethod
    def _transactions(cls, value: str) -> str:
        from speedlayer.sources.generator import GeneratorSource

        if GeneratorSource(parse_uri(value, "--generator URI")).options.kind != "transactions":
            raise ValueError("it must generate transactions: add kind=transactions")
        return value


def fit(spark, options: FraudTraining) -> list[str]:
    """Fit, evaluate on the held-out stretch and save (``speedlayer.pipelines.fraud.model.train``); the report."""
    from speedlayer.pipelines.fraud.model import train

    meta = train(spark, options.model, options.generator, options.events, options.holdout, options.threshold)
    history, held = meta["history"], meta["holdout"]
    return [f"trained on {history['transactions']:,} transactions ({history['frauds']:,} fraud, "
            f"{history['cards']:,} card profiles) in {meta['seconds']}s; saved to {Path(options.model).resolve()}",
            f"held out {held['transactions']:,} later transactions ({held['frauds']:,} fraud): at threshold "
            f"{held['threshold']:g} precision {held['precision']:.3f}, recall {held['recall']:.3f}, "
            f"ROC AUC {held['roc_auc']:.3f}"]


FRAUD_TRAINER = Trainer(FraudTraining, fit, "a logistic regression and card profiles, fitted on generated history")
