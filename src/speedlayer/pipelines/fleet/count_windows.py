"""Count windows: the average speed over every N pings of a vehicle (Flink's count window).

Spark has no count window, so on a stream it is built on per-vehicle state
(``applyInPandasWithState``, one pandas call per vehicle and batch): the state holds the pings not
yet in a window, the number of windows emitted and the last ping emitted. Pings are ordered by
(event time, event id); a ping is final once the watermark has passed it (anything earlier that
arrives later is behind the watermark), and a window is emitted once its N-th ping is final, so
the result does not depend on how pings are split into batches: it equals the static version,
``row_number`` over each vehicle's pings. An event-time timeout emits windows on batches without
new pings of that vehicle. A ping at or before the last one emitted is dropped as late.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from speedlayer.pipelines.base import Params
from speedlayer.pipelines.fleet.options import fleet_options

# PySpark 4.3's worker pads applyInPandasWithState's output with empty frames, which pandas 2.x
# warns about on stderr once per batch; the warning is about PySpark's code, not ours.
warnings.filterwarnings("ignore", message="The behavior of DataFrame concatenation with empty", category=FutureWarning)

OUTPUT_SCHEMA = T.StructType([
    T.StructField("vehicle_id", T.StringType()),
    T.StructField("window_index", T.LongType()),
    T.StructField("window_start", T.TimestampType()),
    T.StructField("window_end", T.TimestampType()),
    T.StructField("pings", T.LongType()),
    T.StructField("avg_speed_kmh", T.DoubleType()),
    T.StructField("max_speed_kmh", T.DoubleType()),
])

#: pending pings as JSON ({"us": [...], "id": [...], "speed": [...]}: PySpark 4.3's Python worker cannot
#: read array types in a state schema, KeyError 'elementType'), windows emitted, last ping emitted
STATE_SCHEMA = T.StructType([
    T.StructField("pending", T.StringType()),
    T.StructField("emitted", T.LongType()),
    T.StructField("last_us", T.LongType()),
    T.StructField("last_id", T.StringType()),
])


def count_windows(events: DataFrame, params: Params) -> DataFrame:
    """Full windows of ``params.count_window`` pings per vehicle, numbered from 0 by event time.

    >>> count_windows(events_df, Params(options=FleetOptions(count_window=20))).columns  # doctest: +SKIP
    ['vehicle_id', 'window_index', 'window_start', 'window_end', 'pings', 'avg_speed_kmh', 'max_speed_kmh']
    """
    n = fleet_options(params).count_window
    if events.isStreaming:
        return events.select("vehicle_id", "event_time", "event_id", "speed_kmh").groupBy("vehicle_id").applyInPandasWithState(
            CountWindowState(n), OUTPUT_SCHEMA, STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout,
        )
    order = Window.partitionBy("vehicle_id").orderBy("event_time", "event_id")
    numbered = events.select("vehicle_id", "event_time", "speed_kmh",
                             F.floor((F.row_number().over(order) - 1) / n).cast("long").alias("window_index"))
    return (
        numbered.groupBy("vehicle_id", "window_index")
        .agg(F.min("event_time").alias("window_start"), F.max("event_time").alias("window_end"),
             F.count(F.lit(1)).alias("pings"), F.avg("speed_kmh").alias("avg_speed_kmh"),
             F.max("speed_kmh").alias("max_speed_kmh"))
        .where(F.col("pings") == n)
        .select(*OUTPUT_SCHEMA.fieldNames())
    )


def _micros(times: pd.Series) -> np.ndarray:
    return pd.to_datetime(times).to_numpy(dtype="datetime64[us]").astype("int64")


class CountWindowState:
    """The per-vehicle step of the streaming count window (see the module docstring)."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, key: tuple, batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        vehicle = key[0]
        if state.exists:
            pending_json, emitted, last_us, last_id = state.get
            pending = json.loads(pending_json)
        else:
            pending, emitted, last_us, last_id = {"us": [], "id": [], "speed": []}, 0, None, None
        frames = [pd.DataFrame({"us": np.asarray(pending["us"], dtype="int64"), "id": pending["id"],
                                "speed": np.asarray(pending["speed"], dtype="float64")})]
        for batch in batches:
            frames.append(pd.DataFrame({"us": _micros(batch["event_time"]), "id": batch["event_id"].to_numpy(),
                                        "speed": batch["speed_kmh"].to_numpy(dtype="float64")}))
        pings = pd.concat(frames, ignore_index=True).sort_values(["us", "id"], kind="stable", ignore_index=True)
        if last_us is not None:  # late: at or before a ping already in an emitted window
            pings = pings[(pings["us"] > last_us) | ((pings["us"] == last_us) & (pings["id"] > last_id))]
        pings = pings.reset_index(drop=True)

        watermark_us = state.getCurrentWatermarkMs() * 1000
        final = int(np.searchsorted(pings["us"].to_numpy(), watermark_us, side="right"))
        full = final // self.n
        out = []
        if full:
            closed = pings.iloc[: full * self.n]
            groups = np.arange(len(closed)) // self.n
            stats = closed.groupby(groups).agg(start=("us", "min"), end=("us", "max"), pings=("us", "size"),
                                               avg=("speed", "mean"), max=("speed", "max"))
            out.append(pd.DataFrame({
                "vehicle_id": vehicle,
                "window_index": emitted + stats.index.to_numpy(dtype="int64"),
                "window_start": pd.to_datetime(stats["start"].to_numpy(), unit="us"),
                "window_end": pd.to_datetime(stats["end"].to_numpy(), unit="us"),
                "pings": stats["pings"].to_numpy(dtype="int64"),
                "avg_speed_kmh": stats["avg"].to_numpy(),
                "max_speed_kmh": stats["max"].to_numpy(),
            }))
            emitted += full
            last_us, last_id = int(closed["us"].iloc[-1]), str(closed["id"].iloc[-1])
        rest = pings.iloc[full * self.n:]
        pending = {"us": rest["us"].tolist(), "id": rest["id"].tolist(), "speed": rest["speed"].tolist()}
        state.update((json.dumps(pending), emitted, last_us, last_id))
        if len(rest) >= self.n:
            # fires once the watermark reaches the ping that completes the next window
            nth_us = int(rest["us"].iloc[self.n - 1])
            state.setTimeoutTimestamp(-(-nth_us // 1000) - 1)
        yield from out
