"""Executors of a run: the lost-executor books on scripted lists (no Spark), the watch's pace and
failures, what the state directory records; one read of a real local session."""

import json
from pathlib import Path

from speedlayer.runtime.executors import (
    EXECUTORS_FILE,
    ExecutorBook,
    ExecutorRecord,
    ExecutorReport,
    ExecutorWatch,
    first_working,
    parse_executors,
    save_report,
    scheduler_reader,
    status_lines,
    status_store_reader,
)

#: Spark's status store as the REST API's ``allexecutors`` gives it (trimmed): the driver, a live
#: executor, one lost while the run went on, one removed before it started
RECORDED = (Path(__file__).parent / "data" / "allexecutors.json").read_text()
START_MS = 1795354400000  # 2026-11-22T13:33:20Z


def driver(cores=None):
    return ExecutorRecord("driver", "10.0.0.1:40000", cores=cores)


def executor(id_, cores=2, active=True, removed_ms=None, reason=None):
    return ExecutorRecord(id_, f"10.0.0.{int(id_) + 5}:4100{id_}", active, cores, removed_ms, reason)


def test_spark_json_parses_into_records():
    records = {r.id: r for r in parse_executors(RECORDED)}
    assert set(records) == {"driver", "0", "1", "2"}
    assert records["0"] == ExecutorRecord("0", "10.0.0.5:41000", True, 2, None, None)
    assert (records["1"].active, records["1"].removed_ms, records["1"].reason) == (
        False, START_MS + 42_114, "Worker lost: worker-2 disconnected")


def test_a_cluster_counts_executors_without_the_driver_and_books_the_lost_ones():
    book = ExecutorBook(local=False, since_ms=START_MS)
    assert book.update(parse_executors(RECORDED), START_MS + 50_000)
    r = book.report
    # executor 2 was removed before the run started: not this run's loss
    assert (r.alive, r.cores, r.lost_count, r.local, r.updated_ms) == (1, 2, 1, False, START_MS + 50_000)
    assert r.lost[0].as_dict() == {"id": "1", "host_port": "10.0.0.6:41001", "lost_ms": START_MS + 42_114,
                                   "reason": "Worker lost: worker-2 disconnected", "lost_at": "2026-11-22T13:34:02.114Z"}
    assert (r.summary(), r.short()) == ("1 (1 lost)", "executors 1 (1 lost), 2 cores")


def test_an_executor_seen_then_gone_is_lost_when_it_went_missing():
    book = ExecutorBook(local=False, since_ms=0)
    book.update([driver(), executor("0"), executor("1")], 1_000)
    assert (book.report.alive, book.report.cores, book.report.lost_count) == (2, 4, 0)
    assert not book.update([driver(), executor("0"), executor("1")], 2_000)  # nothing new: no change
    assert book.report.updated_ms == 1_000
    assert book.update([driver(), executor("0")], 3_000)  # evicted from Spark's list: lost when we saw it gone
    assert [(x.id, x.lost_ms, x.reason) for x in book.report.lost] == [("1", 3_000, None)]
    book.update([driver(), executor("0"), executor("1", active=False, removed_ms=2_500, reason="late news")], 4_000)
    assert book.report.lost_count == 1  # an executor is lost once
    book.update([driver(), executor("0"), executor("3")], 5_000)  # a new one joins
    assert (book.report.alive, book.report.cores, book.report.lost_count) == (2, 4, 1)


def test_cores_are_unknown_when_an_executor_does_not_say():
    book = ExecutorBook(local=False, since_ms=0)
    book.update([driver(), executor("0"), executor("1", cores=None)], 1)
    assert (book.report.alive, book.report.cores, book.report.short()) == (2, None, "executors 2")


def test_local_mode_is_one_executor_the_driver():
    book = ExecutorBook(local=True, since_ms=0)
    book.update([driver(cores=2)], 1)
    r = book.report
    assert (r.alive, r.cores, r.summary(), r.short()) == (1, 2, "local", "executors: local (the driver), 2 cores")


def test_lost_details_are_capped_but_all_are_counted():
    book = ExecutorBook(local=False, since_ms=0)
    book.update([executor(str(i)) for i in range(30)], 1)
    book.update([], 2)
    assert book.report.lost_count == 30 and len(book.report.lost) == 20


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_watch_reads_at_most_once_a_second_and_swallows_failures():
    clock, reads, script = Clock(), [], [[driver(), executor("0")], RuntimeError("session stopped"), [driver()]]

    def read():
        reads.append(clock.now)
        item = script[min(len(reads), len(script)) - 1]
        if isinstance(item, Exception):
            raise item
        return item

    changes = []
    watch = ExecutorWatch(read, local=False, clock=clock, on_change=changes.append)
    assert (watch.report.alive, watch.report.local, watch.report.summary()) == (None, False, "-")
    assert watch.poll().alive == 1
    assert watch.poll().alive == 1 and len(reads) == 1  # within the second: no read
    clock.now += 1.0
    assert watch.poll().alive == 1 and len(reads) == 2  # the read failed: the last report stands
    assert watch.poll(force=True).lost_count == 1 and len(reads) == 3
    assert [c.lost_count for c in changes] == [0, 1]


def test_a_failing_change_callback_and_a_watch_without_spark_are_harmless():
    watch = ExecutorWatch(lambda: [driver(cores=2)], local=True, on_change=lambda r: 1 / 0)
    assert watch.poll().alive == 1
    assert ExecutorWatch.for_session(None).poll(force=True).as_dict()["summary"] == "-"


def test_the_first_route_that_answers_is_kept():
    calls = []

    def broken():
        calls.append("store")
        raise RuntimeError("no status store")

    read = first_working(broken, lambda: calls.append("ids") or [driver()])
    assert read() == [driver()] and read() == [driver()]
    assert calls == ["store", "ids", "ids"]


def test_the_state_directory_records_them_for_status(tmp_path):
    book = ExecutorBook(local=False, since_ms=START_MS)
    book.update(parse_executors(RECORDED), START_MS + 50_000)
    save_report(tmp_path, book.report, running=True)
    assert status_lines(tmp_path) == [
        "executors 1 (1 lost), 2 cores (since 2026-11-22T13:34:10.000Z)",
        "  lost executor 1 on 10.0.0.6:41001 at 2026-11-22T13:34:02.114Z: Worker lost: worker-2 disconnected"]
    save_report(tmp_path, book.report, running=False)
    assert status_lines(tmp_path)[0].startswith("executors 1 (1 lost), 2 cores (when the run stopped, ")
    assert json.loads((tmp_path / EXECUTORS_FILE).read_text())["summary"] == "1 (1 lost)"
    assert [p.name for p in tmp_path.iterdir()] == [EXECUTORS_FILE]  # no temporary file left


def test_nothing_recorded_or_nowhere_to_record_is_silent(tmp_path):
    assert status_lines(tmp_path) == []
    (tmp_path / EXECUTORS_FILE).write_text("{half")
    assert status_lines(tmp_path) == []
    save_report(tmp_path / "gone", ExecutorReport(alive=1), running=True)  # no state directory: nothing, no error
    save_report(tmp_path, ExecutorReport(), running=True)  # unknown: not written over what is there
    assert (tmp_path / EXECUTORS_FILE).read_text() == "{half"


def test_a_local_session_has_one_executor_the_driver_with_its_cores(spark):
    records = status_store_reader(spark)()
    assert [(r.id, r.active) for r in records] == [("driver", True)]
    report = ExecutorWatch.for_session(spark).poll(force=True)
    assert (report.local, report.alive, report.cores, report.lost_count) == (True, 1, 2, 0)  # local[2]
    # the fallback route: the driver with local[2]'s cores; a cluster's scheduler ids (none in local mode)
    assert scheduler_reader(spark, local=True)() == [ExecutorRecord("driver", cores=2)]
    assert scheduler_reader(spark, local=False)() == []



def test_a_bounded_local_run_records_its_executor_for_status(spark, tmp_path):
    from speedlayer.runtime.plan import plan_run
    from speedlayer.runtime.run import Run
    from speedlayer.runtime.settings import RunSettings

    state = tmp_path / "state"
    plan = plan_run(RunSettings(job="fleet", source="generator://?seed=3&rate=1000&vehicles=5", max_events=1000,
                                state_dir=str(state), sinks={"alerts": "memory:executors_alerts"}))
    run = Run(spark, plan)
    run.start_and_wait()
    assert run.executors.report.alive == 1
    data = json.loads((state / EXECUTORS_FILE).read_text())
    assert (data["running"], data["local"], data["alive"], data["cores"], data["lost_count"]) == (False, True, 1, 2, 0)
    assert status_lines(state)[0].startswith("executors: local (the driver), 2 cores (when the run stopped, ")
