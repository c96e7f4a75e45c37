"""A finished soak run's outputs against the plain-Python oracle (``tests/oracle.py``) over the same events.

The generator's event *n* is a pure function of (seed, n, start, rate), so ``speedlayer produce``
with the run's seed, rate and the start its manifest recorded writes the same payloads to JSON
lines; ingest time of event *n* is ``start + n * 1000 / rate`` ms. Each query's last committed
batch (its checkpoint) says how many events it read and, for the windows, the watermark that
closed them. Checked, over the events of the last ``check_minutes`` of closed windows:

- ``windows``: every closed window against the oracle's. An event whose time lags its ingest time
  by less than the watermark delay is always counted (the watermark trails every event read by
  that delay); one lagging more is dropped unless the watermark had not caught up yet (the first
  batches). So a window must equal the oracle's over the on-time events, or over all of them, or
  count strictly between the two (then only its count is checked); every oracle window with an
  on-time event is present, and none twice.
- ``alerts``: every on-time ping above its zone's limit has its alert, with the oracle's excess;
  no alert for a ping that is not above it.
- ``dead-letters``: exactly the offsets whose payload the oracle refuses.
- ``late``: every event kept is one that lagged its ingest time by at least the watermark delay.

Not checked: incidents and trips (their oracle needs the state processors' own closing rules).

    report = check(run_dir, state_dir, outputs, rate=3000, seed=7, vehicles=2000, check_minutes=30)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import unquote, urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import oracle  # noqa: E402

#: the run's settings the soak leaves at their defaults (docs/fleet.md)
WINDOW = timedelta(seconds=10)
WATERMARK = timedelta(seconds=5)
#: events regenerated per ``speedlayer produce`` (bounds the temporary JSON lines on disk)
SLICE = 2_000_000


def committed_files(output: Path) -> list[Path]:
    """The Parquet files Spark's file sink committed (its ``_spark_metadata`` log), not half-written ones."""
    paths: set[Path] = set()
    for log in (output / "_spark_metadata").iterdir() if (output / "_spark_metadata").is_dir() else ():
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action") == "add":
                paths.add(Path(unquote(urlparse(entry["path"]).path)))
    return sorted(paths)


def read_rows(output: Path, columns: list[str]) -> list[dict]:
    """The committed rows of a Parquet output, timestamps as naive UTC datetimes."""
    import pyarrow.parquet as pq

    rows = []
    for file in committed_files(output):
        rows += pq.read_table(file, columns=columns).to_pylist()
    for row in rows:
        for k, v in row.items():
            if isinstance(v, datetime) and v.tzinfo is not None:
                row[k] = v.astimezone(timezone.utc).replace(tzinfo=None)
    return rows


def last_batch(checkpoint: Path, rate: int) -> dict | None:
    """A query's last committed batch: its id, the events it had read by then, its watermark (ms)."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not commits:
        return None
    batch = max(commits)
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    meta, offset = json.loads(lines[1]), json.loads(lines[2])
    seconds = offset["offset"] if isinstance(offset, dict) else offset  # the rate source: seconds since it began
    return {"batch": batch, "events": int(seconds) * rate, "watermark_ms": int(meta.get("batchWatermarkMs", 0))}


def regenerate(uri: str, start_ms: int, first: int, end: int, work: Path):
    """(n, payload) of the generator's events ``first`` … ``end - 1``, in order, via ``speedlayer produce``."""
    for a in range(first, end, SLICE):
        landing = Path(tempfile.mkdtemp(dir=work, prefix="events-"))
        count = min(SLICE, end - a)
        done = subprocess.run([sys.executable, "-m", "speedlayer", "produce", "--to", f"files://{landing}",
                               "--generator", uri, "--start", str(start_ms), "--rate", "0", "--from-event", str(a),
                               "--max-events", str(count), "--chunk", "200000", "--no-progress"],
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"speedlayer produce failed: {done.stderr[-2000:]}")
        for file in sorted(landing.glob("*.jsonl")):
            n = int(file.stem.rsplit("-", 1)[1])
            for i, line in enumerate(file.read_text().splitlines()):
                yield n + i, line
            file.unlink()
        landing.rmdir()


class _Windows:
    """Window aggregates merged over chunks of pings: (start, end, vehicle) -> events, sum, max, over."""

    def __init__(self):
        self.table: dict[tuple, list] = {}

    def add(self, pings: list, closed_by: datetime) -> None:
        for key, w in oracle.windows(pings, WINDOW, closed_by).items():
            have = self.table.setdefault(key, [0, 0.0, float("-inf"), 0])
            have[0] += w["events"]
            have[1] += w["avg_speed_kmh"] * w["events"]
            have[2] = max(have[2], w["max_speed_kmh"])
            have[3] += w["over_limit_events"]

    def get(self, key) -> dict | None:
        w = self.table.get(key)
        return None if w is None else {"events": w[0], "avg_speed_kmh": w[1] / w[0], "max_speed_kmh": w[2],
                                       "over_limit_events": w[3]}


def _same(row: dict, expected: dict | None) -> bool:
    return expected is not None and row["events"] == expected["events"] and \
        row["over_limit_events"] == expected["over_limit_events"] and \
        row["max_speed_kmh"] == expected["max_speed_kmh"] and \
        abs(row["avg_speed_kmh"] - expected["avg_speed_kmh"]) <= 1e-9 * max(1.0, abs(expected["avg_speed_kmh"]))


def compare_windows(rows: list[dict], on_time: _Windows, every: _Windows, since: datetime) -> dict:
    """Each job window against the oracle's (on-time events, every event); the oracle's windows missing."""
    found = {"exact": 0, "exact with late events": 0, "between": 0, "mismatched": [], "missing": [], "duplicated": 0}
    seen = set()
    for row in rows:
        key = (row["window_start"], row["window_end"], row["vehicle_id"])
        if key[0] < since:
            continue
        found["duplicated"] += key in seen
        seen.add(key)
        low, high = on_time.get(key), every.get(key)
        if _same(row, low):
            found["exact"] += 1
        elif _same(row, high):
            found["exact with late events"] += 1
        elif high is not None and (low["events"] if low else 0) < row["events"] < high["events"]:  # some late ones counted
            found["between"] += 1
        else:
            found["mismatched"].append({"key": [str(k) for k in key], "job": row, "on_time": low, "all": high})
    found["missing"] = [[str(k) for k in key] for key in on_time.table if key[0] >= since and key not in seen]
    found["checked"] = len(seen)
    found["ok"] = not (found["mismatched"] or found["missing"] or found["duplicated"])
    for kind in ("mismatched", "missing"):  # their count, and the first few
        found[f"{kind}_count"], found[kind] = len(found[kind]), found[kind][:20]
    return found


def _ms(n: int, start_ms: int, rate: int) -> datetime:
    return oracle.EPOCH + timedelta(milliseconds=start_ms + n * 1000 // rate)


class _Events:
    """The regenerated events routed to each check, a chunk at a time (windows and alerts per query read)."""

    def __init__(self, reads: dict[str, int], closed_by: datetime):
        self.reads, self.closed_by = reads, closed_by
        self.on_time, self.every = _Windows(), _Windows()
        self.expected_alerts: dict[str, float] = {}
        self.possible_alerts: dict[str, float] = {}
        self.refused: set[int] = set()
        self.behind: set[str] = set()
        self.ids: set[str] = set()
        self.chunk: dict[str, list] = {"on_time": [], "late": [], "alerts_on_time": [], "alerts_late": []}

    def add(self, n: int, ping, ingest: datetime) -> None:
        if ping is None:
            if n < self.reads["dead-letters"]:
                self.refused.add(n)
            return
        if ping.event_id in self.ids:
            return  # a re-sent copy
        self.ids.add(ping.event_id)
        on_time = ingest - ping.event_time < WATERMARK
        if not on_time and n < self.reads["late"]:
            self.behind.add(ping.event_id)
        if n < self.reads["windows"]:
            self.chunk["on_time" if on_time else "late"].append(ping)
        if n < self.reads["alerts"]:
            self.chunk["alerts_on_time" if on_time else "alerts_late"].append(ping)

    def flush(self) -> None:
        c = self.chunk
        self.on_time.add(c["on_time"], self.closed_by)
        self.every.add(c["on_time"] + c["late"], self.closed_by)
        self.expected_alerts.update(oracle.alerts(c["alerts_on_time"]))
        self.possible_alerts.update(oracle.alerts(c["alerts_on_time"] + c["alerts_late"]))
        for k in c:
            c[k] = []


def check(state_dir: Path, outputs: dict[str, Path], uri: str, rate: int, check_minutes: float, work: Path) -> dict:
    """Windows, alerts, dead letters and late events of a stopped run against the oracle (module docstring)."""
    manifest = json.loads((state_dir / "speedlayer-run.json").read_text())
    start_ms = int(manifest["run_state"]["generator_start_ms"])
    last = {name: last_batch(state_dir / "checkpoints" / name, rate) for name in ("windows", "alerts", "dead-letters", "late")}
    if any(v is None for v in last.values()):
        return {"ok": False, "error": f"a query committed no batch: {last}"}
    closed_by = oracle.EPOCH + timedelta(milliseconds=last["windows"]["watermark_ms"])
    since = oracle.EPOCH + timedelta(milliseconds=start_ms) - timedelta(days=1)
    first = 0
    if check_minutes:
        since = max(since, closed_by - timedelta(minutes=check_minutes))
        # the events of windows from ``since`` on: none was ingested before its own event time
        first = max(0, int((since - oracle.EPOCH).total_seconds() * 1000 - start_ms) * rate // 1000)
    reads = {name: b["events"] for name, b in last.items()}
    events = _Events(reads, closed_by)
    end = max(reads.values())
    for n, payload in regenerate(uri, start_ms, first, end, work):
        ingest = _ms(n, start_ms, rate)
        events.add(n, oracle.parse(payload, ingest), ingest)
        if n % 200_000 == 199_999:
            events.flush()
    events.flush()
    found = {"start_ms": start_ms, "first_event": first, "events_regenerated": end - first, "last_batches": last,
            "windows_closed_by": str(closed_by), "checked_since": str(since),
            "windows": compare_windows(read_rows(outputs["windows"], ["window_start", "window_end", "vehicle_id", "events",
                                                                      "avg_speed_kmh", "max_speed_kmh", "over_limit_events"]),
                                       events.on_time, events.every, since),
            "alerts": _check_alerts(read_rows(outputs["alerts"], ["event_id", "excess_kmh"]), events),
            "dead-letters": _check_dead_letters(read_rows(outputs["dead-letters"], ["offset"]), events, first),
            "late": _check_late(read_rows(outputs["late"], ["event_id"]), events)}
    found["ok"] = all(found[name]["ok"] for name in ("windows", "alerts", "dead-letters", "late"))
    return found


def _check_alerts(rows: list[dict], events: _Events) -> dict:
    got = {r["event_id"]: r["excess_kmh"] for r in rows if r["event_id"] in events.ids}
    missing = sorted(set(events.expected_alerts) - set(got))
    wrong = sorted(k for k, v in got.items() if k not in events.possible_alerts or abs(events.possible_alerts[k] - v) > 1e-6)
    return {"checked": len(got), "expected at least": len(events.expected_alerts),
            "outside the regenerated events": len(rows) - len(got), "missing_count": len(missing), "missing": missing[:20],
            "wrong_count": len(wrong), "wrong": wrong[:20], "ok": not missing and not wrong}


def _check_dead_letters(rows: list[dict], events: _Events, first: int) -> dict:
    got = {int(r["offset"]) for r in rows if int(r["offset"]) >= first}
    missing, unexpected = sorted(events.refused - got), sorted(got - events.refused)
    return {"checked": len(got), "expected": len(events.refused), "missing_count": len(missing), "missing": missing[:20],
            "unexpected_count": len(unexpected), "unexpected": unexpected[:20], "ok": got == events.refused}


def _check_late(rows: list[dict], events: _Events) -> dict:
    kept = {r["event_id"] for r in rows if r["event_id"] in events.ids}
    on_time = sorted(kept - events.behind)
    return {"checked": len(kept), "outside the regenerated events": len({r["event_id"] for r in rows}) - len(kept),
            "on_time_kept_count": len(on_time), "on_time_kept": on_time[:20], "ok": not on_time}
