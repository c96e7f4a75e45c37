"""``speedlayer status``: what each query of a run has committed, read from its checkpoints."""

from __future__ import annotations

import typer

from speedlayer.cli.console import out


def status_command(
    state_dir: str = typer.Option(..., "--state-dir", help="the --state-dir of a run (or one query's checkpoint)"),
    operators: bool = typer.Option(True, "--operators/--no-operators",
                                   help="describe stateful operators with Spark's state-metadata source (starts Spark)"),
) -> None:
    """Each query's last committed batch, offsets and watermark, read from the checkpoints (running or stopped),
    and the run's executors."""
    from pathlib import Path

    from speedlayer.core.sizes import human_size
    from speedlayer.core.times import iso
    from speedlayer.monitor.status import add_operators, compact, find_checkpoints, kafka_lag
    from speedlayer.runtime.executors import status_lines

    statuses = find_checkpoints(Path(state_dir))
    if operators and any(s.stateful for s in statuses):
        from speedlayer.runtime.session import tool_session

        spark = tool_session("status")
        try:
            add_operators(spark, statuses)
        finally:
            spark.stop()
    lags = kafka_lag(Path(state_dir), statuses)
    for s in statuses:
        committed = "none" if s.last_committed is None else str(s.last_committed)
        pending = f" (batch {s.last_planned} planned, not committed)" if s.last_planned != s.last_committed else ""
        out.print(f"{s.name}: last committed batch {committed}{pending}, batch time {iso(s.batch_time_ms) or '-'}, "
                  f"watermark {s.watermark or '-'}, checkpoint {human_size(s.size_bytes)} on disk", soft_wrap=True,
                  markup=False, highlight=False)
        out.print(f"  offsets: {compact(s.offsets, 400) or '-'}", soft_wrap=True, markup=False, highlight=False)
        if s.name in lags:
            out.print(f"  Kafka lag (records beyond the last committed batch): {lags[s.name]}", soft_wrap=True,
                      markup=False, highlight=False)
        for op in s.operators:
            if "error" in op:
                out.print(f"  state metadata unavailable: {op['error']}", soft_wrap=True, markup=False)
            else:
                out.print(f"  operator {op.get('operatorId')} {op.get('operatorName')} store {op.get('stateStoreName')}, "
                          f"{op.get('numPartitions')} partitions, batches {op.get('minBatchId')}..{op.get('maxBatchId')}",
                          soft_wrap=True, markup=False)
    out.print(f"checkpoints on disk: {human_size(sum(s.size_bytes for s in statuses))} in total", soft_wrap=True,
              markup=False, highlight=False)
    for line in status_lines(Path(state_dir)):  # recorded by the run: executors alive, cores, lost
        out.print(line, soft_wrap=True, markup=False, highlight=False)
