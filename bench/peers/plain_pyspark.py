"""The fleet window job in hand-written plain PySpark over the dataset's files (no speedlayer code in the job).

    .venv/bin/python bench/peers/plain_pyspark.py DATASET_DIR OUT_PARQUET_DIR

``bench/plain_fleet.py``'s ``plain_windows`` (from_json into a typed schema, 5 s watermark,
dedup by event_id within it, zone limit as CASE WHEN, 10 s windows per vehicle, append mode) on
Spark's text file source, trigger availableNow, into a Parquet directory. The session is
speedlayer's ``build_session`` so both Spark sides run with the same settings.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from plain_fleet import plain_windows


def main() -> None:
    from speedlayer.runtime.session import build_session

    dataset, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    with tempfile.TemporaryDirectory(prefix="plain-peer-") as tmp:
        spark = build_session("local[*]", {"spark.ui.enabled": "false"}, app_name="plain-peer",
                              log_file=Path(tmp) / "spark.log")
        raw = spark.readStream.format("text").load(str(dataset))
        query = (plain_windows(raw).writeStream.outputMode("append").format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(Path(tmp) / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        spark.stop()


if __name__ == "__main__":
    main()
