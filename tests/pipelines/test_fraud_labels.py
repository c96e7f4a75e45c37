"""The transactions' later verdicts (``kind=labels``) and the fraud pattern's drift, checked on the payloads."""

from __future__ import annotations

import json
from datetime import datetime

from pyspark.sql import functions as F

from speedlayer.pipelines.fraud.transaction_kind import (
    COUNTRIES,
    DRIFTED_MIX,
    FRAUD_MIX,
    TransactionOptions,
    transaction_rows,
)
from speedlayer.sources import open_source

START = "2026-11-22T10:00:00Z"
COMMON = f"seed=3&rate=100&start={START}&cards=50&fraud=0.2&disorder=0s&late=0"


def _payloads(spark, uri: str, events: int) -> list[dict]:
    rows = open_source(uri).read_batch(spark, events).select("value").collect()
    return [json.loads(r.value) for r in rows if r.value.startswith("{") and r.value.endswith("}")]


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_each_label_tells_the_truth_of_the_transaction_it_names_a_delay_later(spark):
    options = TransactionOptions(kind="transactions", seed=3, rate=100, start=START, cards=50, fraud=0.2,
                                 disorder="0s", late=0, duplicates=0.05)
    seq = spark.range(0, 3000).select(F.col("id").alias("n"))
    truth = {r.tx_id: (bool(r.is_fraud), r.time) for r in
             transaction_rows(seq, options, int(_at(START).timestamp() * 1000)).where("n = src").collect()}
    labels = _payloads(spark, f"generator://?kind=labels&{COMMON}&duplicates=0.05&label_delay=10s&malformed=0", 4000)

    # the first 1,000 (10 s at 100/s) label nothing: no payment came before; since then every label names a
    # payment (none a number that re-sent an earlier payment), and all but the few whose slot carried a
    # re-sent label have one
    named = {label["tx_id"] for label in labels}
    assert named <= set(truth) and len(named) > 0.9 * len(truth) and len(labels) > len(named)
    for label in labels:
        fraud, paid = truth[label["tx_id"]]
        assert label["is_fraud"] is fraud
        assert (_at(label["labelled_at"]) - _at(paid)).total_seconds() == 10.0
    assert 0.1 < sum(label["is_fraud"] for label in labels) / len(labels) < 0.3


def test_unknown_re_sent_and_malformed_labels_are_made_when_asked(spark):
    uri = f"generator://?kind=labels&{COMMON}&label_delay=1s&unknown=0.1&duplicates=0.1&malformed=0.05"
    raw = [r.value for r in open_source(uri).read_batch(spark, 3000).select("value").collect()]
    labels = [json.loads(v) for v in raw if v.startswith('{"tx_id"') and v.endswith("}")]
    ids = [label["tx_id"] for label in labels]
    assert 0.05 < sum(i.startswith("t-unknown-") for i in ids) / len(ids) < 0.15
    assert len(ids) - len(set(ids)) > 100  # re-sent copies
    assert len(raw) - len(labels) > 50  # corrupted payloads


def test_after_the_drift_fraud_shops_at_home_small_in_everyday_places(spark):
    payloads = _payloads(spark, f"generator://?kind=transactions&{COMMON}&duplicates=0.05&drift=20s&malformed=0", 4000)
    options = TransactionOptions(kind="transactions", seed=3, rate=100, start=START, cards=50, fraud=0.2, drift="20s",
                                 disorder="0s", late=0, duplicates=0.05)
    seq = spark.range(0, 4000).select(F.col("id").alias("n"))
    fraud = {r.tx_id for r in transaction_rows(seq, options, int(_at(START).timestamp() * 1000))
             .where("is_fraud = 1").collect()}
    before = [p for p in payloads if p["tx_id"] in fraud and int(p["tx_id"][2:]) < 2000]
    after = [p for p in payloads if p["tx_id"] in fraud and int(p["tx_id"][2:]) >= 2000]
    assert before and after
    assert {p["merchant_category"] for p in before} <= {c for c, _ in FRAUD_MIX}
    assert {p["merchant_category"] for p in after} <= {c for c, _ in DRIFTED_MIX}
    homes = {c for c, _ in COUNTRIES}
    assert sum(p["country"] not in homes for p in before) / len(before) > 0.5 and all(p["country"] in homes for p in after)
    assert median(p["amount"] for p in after) < median(p["amount"] for p in before) / 10


def median(values) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
