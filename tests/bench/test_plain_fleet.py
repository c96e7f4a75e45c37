"""The benchmark's plain PySpark outputs (bench/plain_fleet.py) equal speedlayer's on the same micro-batches."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from whole_job import ALL, check_outputs  # noqa: E402


def test_plain_outputs_equal_speedlayers_over_the_same_batches(spark, tmp_path):
    results = check_outputs(spark, list(ALL), rows=400, batches=3, tmp=tmp_path)
    for name, (ours, theirs, why) in results.items():
        assert why is None, f"{name}: speedlayer {ours} rows, plain {theirs}: {why}"
    # every output has rows to compare, so none can drift unnoticed
    assert all(ours > 0 for ours, _, _ in results.values()), results
