"""What a run did, per query and in all: the summary the CLI prints and ``last-run.json`` keeps.

>>> summarise(plan, tracker, "end of input", 12.5).stopped_by  # doctest: +SKIP
'end of input'
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from speedlayer.core.sizes import tree_size
from speedlayer.runtime.checkpoints import told_when_full
from speedlayer.runtime.plan import RunPlan
from speedlayer.runtime.progress import ProgressTracker

#: what the last run did (per query: batches, rows, final watermark), written when it stops
LAST_RUN = "last-run.json"


@dataclass
class QuerySummary:
    name: str
    output: str
    sink: str
    guarantee: str
    mode: str
    #: micro-batches run; in continuous mode, the epochs committed
    batches: int
    #: None in continuous mode, where Spark counts no rows
    input_rows: int | None
    watermark: str | None
    #: the bytes of the query's checkpoint on disk (the job's shared query: the one all its outputs share)
    checkpoint_bytes: int = 0


@dataclass
class RunSummary:
    queries: list[QuerySummary]
    elapsed_s: float
    state_dir: Path
    stopped_by: str
    #: the bytes of all the run's checkpoints on disk (a shared checkpoint counted once)
    checkpoint_bytes: int = 0


def summarise(plan: RunPlan, tracker: ProgressTracker, stopped_by: str, elapsed_s: float) -> RunSummary:
    """Each planned query's batches, rows, final watermark and checkpoint size, from its progress."""
    rows = []
    sizes = {path: tree_size(path) for path in dict.fromkeys(qp.checkpoint for qp in plan.queries)}
    continuous = plan.trigger.continuous
    for qp in plan.queries:
        progress = tracker.get(qp.name)
        batches = committed_epochs(qp.checkpoint) if continuous else progress.batches if progress else 0
        rows.append(QuerySummary(
            qp.name, qp.output.name, qp.sink.describe(), qp.sink.guarantee, qp.mode,
            batches, None if continuous else progress.input_rows if progress else 0,
            progress.watermark if progress else None, sizes[qp.checkpoint],
        ))
    return RunSummary(rows, elapsed_s, plan.state_dir, stopped_by, sum(sizes.values()))


def committed_epochs(checkpoint: Path) -> int:
    """The epochs a continuous query committed, from its commit log (Spark reports no progress in that mode)."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids) + 1 if ids else 0


def save_summary(summary: RunSummary) -> None:
    """Write the summary to ``last-run.json`` in its state directory (``speedlayer status`` reads it)."""
    if summary.state_dir.is_dir():
        with told_when_full(summary.state_dir):
            (summary.state_dir / LAST_RUN).write_text(json.dumps(dataclasses.asdict(summary), indent=2, default=str))
