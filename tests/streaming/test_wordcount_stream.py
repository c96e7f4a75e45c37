"""wordcount as a stream: a landing directory of text files and a socket sending garbage."""

import os
import time

from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.run import Run
from speedlayer.runtime.settings import RunSettings
from speedlayer.sinks.console import ConsoleSink
from tests.sources.test_socket import LineServer, wait_rows

T0 = 1795341600  # 2026-11-22T10:00:00Z


def test_files_give_per_batch_counts_and_windows_on_event_or_arrival_time(spark, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.txt").write_text("2026-11-22T10:00:01Z To be, or not to be\n\n2026-11-22T10:00:15Z be quick\n")
    (landing / "b.txt").write_text("not now\n")  # no timestamps: the file's arrival (mtime) is their event time
    os.utime(landing / "a.txt", (T0 + 16, T0 + 16))  # written after its last line's time, as a live landing is
    os.utime(landing / "b.txt", (T0 + 25, T0 + 25))
    settings = RunSettings(job="wordcount", source=f"files:{landing}?format=text&max_files_per_trigger=1",
                           trigger="available-now", state_dir=str(tmp_path / "state"),
                           sinks={"batch-counts": "console:", "windows": "memory:wc_windows"},
                           output_mode={"windows": "complete"})
    plan = plan_run(settings)
    batches = []
    next(q.sink for q in plan.queries if isinstance(q.sink, ConsoleSink)).display = batches.append
    summary = Run(spark, plan).start_and_wait()
    assert summary.stopped_by == "end of input"

    per_batch = sorted((v.batch_id, *row) for v in batches for row in v.rows)
    assert per_batch == [(0, 0, "be", 3), (0, 0, "not", 1), (0, 0, "or", 1), (0, 0, "quick", 1), (0, 0, "to", 2),
                         (1, 1, "not", 1), (1, 1, "now", 1)]
    windows = {(r.window_start.strftime("%M:%S"), r.word): r["count"] for r in spark.table("wc_windows").collect()
               if r.word in ("be", "not")}
    # 30 s windows every 10 s; "be" at :01 (x2) and :15, "not" at :01 and at :25 (arrival)
    assert windows == {("59:40", "be"): 2, ("59:50", "be"): 3, ("00:00", "be"): 3, ("00:10", "be"): 1,
                       ("59:40", "not"): 1, ("59:50", "not"): 1, ("00:00", "not"): 2, ("00:10", "not"): 1,
                       ("00:20", "not"): 1}


class ByteServer(LineServer):
    """Sends raw bytes (not lines of text) to every connection."""

    def payload(self) -> bytes:
        return b"".join(self.lines)


def test_socket_garbage_and_huge_lines_become_dead_letters_and_the_job_goes_on(spark, tmp_path):
    server = ByteServer([b"hello world\n", b"\xff\xfe\x00\x01garbage\n", b"x" * (1 << 20) + b"y\n", b"\n", b"hello\n"])
    try:
        settings = RunSettings(job="wordcount", source=f"socket://127.0.0.1:{server.port}", trigger="processing:0s",
                               sinks={"totals": "memory:sock_totals", "dead-letters": "memory:sock_dead"})
        run = Run(spark, plan_run(settings))
        run.start()
        try:
            dead = wait_rows(spark, "sock_dead", 2)
            deadline = time.monotonic() + 60
            while dict(map(tuple, spark.table("sock_totals").collect())) != {"hello": 2, "world": 1}:
                assert time.monotonic() < deadline, spark.table("sock_totals").collect()
                time.sleep(0.2)
            assert all(q.isActive for q in run.queries)
        finally:
            run.stop_requested.set()
            run.wait()
            run.cleanup()
    finally:
        server.close()
    assert sorted(r.reason[:30] for r in dead) == ["binary data, not a line of UTF", "line longer than 1 MiB (104857"]
