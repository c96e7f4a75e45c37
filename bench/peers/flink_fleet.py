"""The fleet window job on Apache Flink through PyFlink's Table API (own virtual environment).

    .peers-venv/flink/bin/python bench/peers/flink_fleet.py DATASET_DIR OUT.jsonl [--parallelism 2] [--runtime streaming|batch]

Flink SQL over the filesystem connector (JSON lines): event time parsed from the ISO text, a
5 s watermark, ``TUMBLE`` 10 s windows per vehicle with count, avg, max and the over-limit count
(the zone limit as a CASE over the same zones table). ``--runtime streaming`` (default) is the
streaming runtime on the bounded directory (all windows fire at the end of input);
``--runtime batch`` is the same SQL in Flink's batch runtime.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timezone
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import WATERMARK_MS, WINDOW_MS, limit_case, write_windows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dataset", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--runtime", choices=("streaming", "batch"), default="streaming")
    args = p.parse_args()
    settings = EnvironmentSettings.in_streaming_mode() if args.runtime == "streaming" else EnvironmentSettings.in_batch_mode()
    env = TableEnvironment.create(settings)
    env.get_config().set("parallelism.default", str(args.parallelism))
    env.get_config().set("table.local-time-zone", "UTC")
    env.execute_sql(f"""
        CREATE TABLE events (
            event_id STRING, vehicle_id STRING, event_time STRING, speed_kmh DOUBLE, lat DOUBLE, lon DOUBLE,
            ts AS TO_TIMESTAMP(event_time, 'yyyy-MM-dd''T''HH:mm:ss.SSS''Z'''),
            WATERMARK FOR ts AS ts - INTERVAL '{WATERMARK_MS // 1000}' SECOND
        ) WITH ('connector' = 'filesystem', 'path' = 'file://{args.dataset.resolve()}', 'format' = 'json')
    """)
    result = env.execute_sql(f"""
        SELECT window_start, vehicle_id, COUNT(*) AS events, AVG(speed_kmh) AS avg_speed_kmh,
               MAX(speed_kmh) AS max_speed_kmh,
               CAST(SUM(CASE WHEN speed_kmh > {limit_case()} THEN 1 ELSE 0 END) AS BIGINT) AS over_limit_events
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '{WINDOW_MS // 1000}' SECOND))
        GROUP BY window_start, window_end, vehicle_id
    """)
    rows = []
    with result.collect() as results:
        for r in results:
            rows.append({"window_start": int(r[0].replace(tzinfo=timezone.utc).timestamp() * 1000), "vehicle_id": r[1],
                         "events": int(r[2]), "avg_speed_kmh": float(r[3]), "max_speed_kmh": float(r[4]),
                         "over_limit_events": int(r[5])})
    print(write_windows(rows, args.out), "windows")


if __name__ == "__main__":
    main()
