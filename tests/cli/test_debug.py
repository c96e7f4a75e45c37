"""``--debug``: a job whose Python UDF fails is one line without it; with it, the traceback and Spark's text follow."""

import importlib
import sys

import pytest

from speedlayer.cli.app import main
from speedlayer.runtime.shipping import CACHE_ENV

#: a user's job (a file in the current directory, run as debug_refunds:REFUNDS) whose UDF refuses big refunds
REFUNDS = '''
from pyspark.sql import functions as F, types as T
from speedlayer import APPEND, DEAD_LETTERS, EventSchema, Field, Job, Output

REFUND = EventSchema("refund", (Field("refund_id", "string"), Field("amount", "double"), Field("time", "timestamp")),
                     time_field="time")


@F.udf(returnType=T.DoubleType())
def checked(amount):
    if amount > 100:
        raise ValueError(f"refund of {amount} needs a manager")
    return amount


def pipeline(refunds, params):
    return {"refunds": refunds.select("refund_id", checked("amount").alias("amount"))}


REFUNDS = Job(name="refunds", summary="refunds, checked in Python", schema=REFUND, pipeline=pipeline,
              outputs={"refunds": Output("refunds", "checked refunds", (APPEND,), APPEND, False, ("refund_id",)),
                       "dead-letters": DEAD_LETTERS})
'''
FAILURE = ("error: query {table} failed: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: "
           "ValueError: refund of 500.0 needs a manager")


@pytest.fixture
def refunds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv("SPEEDLAYER_DEBUG", raising=False)
    (tmp_path / "debug_refunds.py").write_text(REFUNDS)
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "r.jsonl").write_text('{"refund_id": "r1", "amount": 500, "time": "2026-01-01T00:00:00Z"}\n')
    importlib.invalidate_caches()
    yield
    sys.modules.pop("debug_refunds", None)


def run_refunds(capsys, table: str, *options: str) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exit_info:
        main([*options, "run", "debug_refunds:REFUNDS", "--source", "files:landing", "--trigger", "available-now",
              "--sink", f"refunds=memory:{table}", "--state-dir", table, "--no-live",
              "--conf", "spark.sql.shuffle.partitions=2"])  # as the tests' shared session has it
    return exit_info.value.code, capsys.readouterr().err.splitlines()


def test_a_failing_udf_is_one_line_naming_the_workers_exception(spark, refunds, capsys):
    code, lines = run_refunds(capsys, "refunds_plain")
    assert code == 1
    assert [line for line in lines if line.startswith("error")] == [FAILURE.format(table="refunds_plain")]
    assert lines[-1] == FAILURE.format(table="refunds_plain")
    assert not any("Traceback" in line for line in lines)


def test_with_debug_the_traceback_and_sparks_text_follow_the_line(spark, refunds, capsys):
    code, lines = run_refunds(capsys, "refunds_debug", "--debug")
    assert code == 1
    first = lines.index(FAILURE.format(table="refunds_debug"))
    details = "\n".join(lines[first + 1:])
    # Spark's error, holding the Python worker's own traceback, is the cause of speedlayer's one line
    assert "StreamingQueryException: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback" in details
    assert 'debug_refunds.py", line 12, in checked' in details
    assert "The above exception was the direct cause of the following exception:" in details
    assert "speedlayer.core.errors.QueryFailedError: query refunds_debug failed:" in details
    assert "JVM stack trace of StreamingQueryException:" in details
