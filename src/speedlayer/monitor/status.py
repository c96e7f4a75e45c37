"""``speedlayer status --state-dir DIR``: what each query of a run has committed, read from its checkpoint.

A checkpoint directory holds ``offsets/<batch>`` (written when a batch is planned: a version line,
the batch's metadata with ``batchWatermarkMs``, then one line of offsets per source) and
``commits/<batch>`` (written once the sink has committed the batch, with ``nextBatchWatermarkMs``).
The last committed batch is the highest ``commits/`` entry; its offsets are what the sink holds.
Stateful queries also have ``state/``, which Spark's ``state-metadata`` source describes
(operators, state stores, partitions, batch range). Reading files needs no Spark; the operators do.

>>> [c.name for c in find_checkpoints(Path("state/fleet"))]  # doctest: +SKIP
['alerts', 'windows']
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedlayer.core.errors import ConfigError
from speedlayer.core.sizes import tree_size
from speedlayer.core.times import iso
from speedlayer.runtime.manifest import MANIFEST
from speedlayer.runtime.shared import SHARED_CHECKPOINT, recorded_outputs
from speedlayer.sources.base import end_offsets


@dataclass
class CheckpointStatus:
    name: str
    path: Path
    last_committed: int | None
    last_planned: int | None
    offsets: list[Any] = field(default_factory=list)
    watermark_ms: int | None = None
    batch_time_ms: int | None = None
    stateful: bool = False
    operators: list[dict[str, Any]] = field(default_factory=list)
    #: the bytes of the checkpoint's files on disk
    size_bytes: int = 0

    @property
    def watermark(self) -> str | None:
        return iso(self.watermark_ms) if self.watermark_ms else None


def _batches(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _lines(file: Path) -> list[str]:
    return [line for line in file.read_text().splitlines() if line.strip()]


def is_checkpoint(path: Path) -> bool:
    return (path / "offsets").is_dir() and ((path / "metadata").is_file() or (path / "commits").is_dir())


def read_checkpoint(path: Path, name: str | None = None) -> CheckpointStatus:
    """The committed position of one query's checkpoint (no Spark needed)."""
    commits, planned = _batches(path / "commits"), _batches(path / "offsets")
    status = CheckpointStatus(name or path.name, path, commits[-1] if commits else None,
                              planned[-1] if planned else None, stateful=(path / "state").is_dir(),
                              size_bytes=tree_size(path))
    if status.last_committed is not None and (path / "offsets" / str(status.last_committed)).is_file():
        lines = _lines(path / "offsets" / str(status.last_committed))
        meta = json.loads(lines[1]) if len(lines) > 1 else {}
        status.batch_time_ms = meta.get("batchTimestampMs")
        status.watermark_ms = meta.get("batchWatermarkMs")
        for line in lines[2:]:
            try:
                status.offsets.append(json.loads(line))
            except ValueError:
                status.offsets.append(line)
        commit = _lines(path / "commits" / str(status.last_committed))
        if len(commit) > 1:
            status.watermark_ms = json.loads(commit[1]).get("nextBatchWatermarkMs", status.watermark_ms)
    return status


def _label(checkpoint: Path) -> str:
    """A query's checkpoint by its output's name; the job's shared query by the outputs it writes."""
    outputs = recorded_outputs(checkpoint) if checkpoint.name == SHARED_CHECKPOINT else None
    return f"shared: {', '.join(outputs)}" if outputs else checkpoint.name


def find_checkpoints(state_dir: Path) -> list[CheckpointStatus]:
    """Every query checkpoint in a run's state directory (or the directory itself when it is one).

    A directory with none is a ConfigError (one line).
    """
    state_dir = Path(state_dir)
    if not state_dir.is_dir():
        raise ConfigError(f"{state_dir} does not exist: give the --state-dir of a run")
    if is_checkpoint(state_dir):
        return [read_checkpoint(state_dir)]
    found = [read_checkpoint(p, _label(p)) for p in sorted((state_dir / "checkpoints").glob("*")) if is_checkpoint(p)]
    if is_checkpoint(state_dir / "dashboard-checkpoint"):
        found.append(read_checkpoint(state_dir / "dashboard-checkpoint", "(dashboard feed)"))
    if not found:
        raise ConfigError(f"{state_dir} is not a checkpoint nor a run's state directory (no offsets/ or "
                          "checkpoints/*/offsets/ in it): give the --state-dir a run used")
    return found


def add_operators(spark, statuses: list[CheckpointStatus]) -> None:
    """Fill ``operators`` of stateful checkpoints from Spark's ``state-metadata`` source."""
    for status in statuses:
        if not status.stateful:
            continue
        try:
            rows = spark.read.format("state-metadata").load(str(status.path)).collect()
        except Exception as exc:  # noqa: BLE001 — an old or damaged state folder: say so, go on
            status.operators = [{"error": " ".join(str(exc).split())[:200]}]
            continue
        status.operators = [r.asDict() for r in rows]


def compact(offsets: list[Any], width: int = 160) -> str:
    text = "; ".join(json.dumps(o, separators=(",", ":")) if not isinstance(o, str) else o for o in offsets)
    return text if len(text) <= width else text[: width - 1] + "…"


def kafka_lag(state_dir: Path, statuses: list[CheckpointStatus], timeout_s: float = 5.0) -> dict[str, str]:
    """Per query, how many records each Kafka partition holds beyond the query's last committed batch, asked
    of the brokers the run's manifest names (its source). Empty for a run of another source; one line
    saying why where the brokers cannot be asked.
    """
    manifest = Path(state_dir) / MANIFEST
    try:
        source = json.loads(manifest.read_text())["settings"]["source"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not str(source).startswith("kafka://"):
        return {}
    committed = {s.name: {tp: off for entry in s.offsets for tp, off in end_offsets({"endOffset": entry}).items()}
                 for s in statuses}
    try:
        from speedlayer.core.uris import parse_uri
        from speedlayer.sources.kafka import kafka_client, parse_brokers, quiet

        kafka = kafka_client()
        consumer = kafka.Consumer({"bootstrap.servers": ",".join(parse_brokers(parse_uri(source))),
                                   "group.id": "speedlayer-status", "socket.connection.setup.timeout.ms": 3000},
                                  logger=quiet())
    except Exception as exc:  # noqa: BLE001 — status still shows what the checkpoints say
        return {name: f"unknown ({' '.join(str(exc).split())[:160]})" for name, parts in committed.items() if parts}
    lags: dict[str, str] = {}
    try:
        for name, parts in committed.items():
            shown = []
            for (topic, partition), offset in sorted(parts.items()):
                try:
                    _, high = consumer.get_watermark_offsets(kafka.TopicPartition(topic, partition), timeout=timeout_s)
                except kafka.KafkaException as exc:
                    lags[name] = f"unknown (Kafka did not answer: {exc.args[0].str()})"
                    break
                shown.append(f"{topic}/{partition} {max(high - offset, 0):,}")
            else:
                if shown:
                    lags[name] = ", ".join(shown)
    finally:
        consumer.close()
    return lags
