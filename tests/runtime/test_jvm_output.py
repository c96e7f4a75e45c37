"""What Spark's JVM prints reaches the terminal, except PySpark's own lost-connection tracebacks and chatter."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from speedlayer.runtime.jvm_output import DAEMON_FLUSH, TRACEBACK, pysparks_lost_connection, split_blocks

DAEMON_BLOCK = [DAEMON_FLUSH, TRACEBACK,
                '  File "/venv/lib/python3.11/site-packages/pyspark/daemon.py", line 93, in worker',
                "    outfile.flush()",
                "BrokenPipeError: [Errno 32] Broken pipe"]
USER_BLOCK = [TRACEBACK, '  File "/jobs/orders.py", line 12, in total', "    return a / b",
              "ZeroDivisionError: division by zero"]


def test_only_pysparks_lost_connection_tracebacks_are_taken_aside():
    runner_eof = [TRACEBACK, '  File "/x/pyspark.zip/pyspark/serializers.py", line 5, in read', "EOFError"]
    pyspark_key_error = [TRACEBACK, '  File "/x/pyspark/worker.py", line 9, in main', "KeyError: 'a'"]
    # a transformWithState driver worker that could not connect back in time: the run restarts the query, says so
    no_socket = [TRACEBACK, '  File "<frozen runpy>", line 198, in _run_module_as_main',
                 '  File "/v/pyspark.zip/pyspark/util.py", line 852, in local_connect_and_auth',
                 "pyspark.errors.exceptions.base.PySparkRuntimeError: [CANNOT_OPEN_SOCKET] Can not open socket: [...]"]
    assert pysparks_lost_connection(DAEMON_BLOCK) and pysparks_lost_connection(runner_eof)
    assert pysparks_lost_connection(no_socket)
    assert not pysparks_lost_connection(USER_BLOCK)  # a user's code in the frames
    assert not pysparks_lost_connection(pyspark_key_error)  # PySpark's own, but not a closed connection
    assert not pysparks_lost_connection([DAEMON_FLUSH, "no traceback follows"])


def test_lines_are_grouped_into_whole_tracebacks_and_single_lines():
    lines = ["resolving packages", *DAEMON_BLOCK, "hello", *USER_BLOCK, TRACEBACK]
    assert list(split_blocks(lines)) == [(["resolving packages"], False), (DAEMON_BLOCK, True), (["hello"], False),
                                         (USER_BLOCK, True), ([TRACEBACK], True)]


DAEMON_TEXT, USER_TEXT = "\n".join(DAEMON_BLOCK) + "\n", "\n".join(USER_BLOCK) + "\n"
#: what PySpark's transformWithState driver worker prints at a query's start (print of a text ending in a newline)
CHATTER = "Streaming TransformWithStateInPandas Python worker Starting execution of UDF: <bound method ...>.\n\n"
WORKER_PRINTS = textwrap.dedent(f"""
    import sys
    from pathlib import Path
    from speedlayer.runtime.session import build_session

    def prints(_):
        sys.stderr.write({DAEMON_TEXT!r})
        sys.stderr.write({CHATTER!r})
        sys.stderr.write("a line of the job's own\\n")
        sys.stderr.write({USER_TEXT!r})
        sys.stderr.flush()
        return 1

    spark = build_session("local[1]", {{"spark.ui.enabled": "false"}}, log_file=Path(sys.argv[1]))
    print("sum", spark.sparkContext.parallelize([1], 1).map(prints).sum(), flush=True)
    spark.stop()
""")


@pytest.mark.timeout(240)
def test_a_python_worker_prints_through_the_filter_to_the_terminal_and_the_log(tmp_path):
    log = tmp_path / "spark.log"
    done = subprocess.run([sys.executable, "-c", WORKER_PRINTS, str(log)], capture_output=True, text=True, timeout=200)
    assert done.returncode == 0 and "sum 1" in done.stdout, done.stderr[-3000:]
    # the worker really printed: its own line and a user's traceback reach the terminal, whole
    assert "a line of the job's own" in done.stderr and USER_TEXT in done.stderr, done.stderr[-3000:]
    assert DAEMON_FLUSH not in done.stderr and "BrokenPipeError" not in done.stderr
    assert "TransformWithState" not in done.stderr and "\n\n\n" not in done.stderr
    assert DAEMON_TEXT in log.read_text() and CHATTER in log.read_text()
    # Java's notice at the JVM's start (Spark loads the incubating vector module): in the log, not on the terminal
    assert "WARNING: Using incubator modules" in log.read_text() and "incubator" not in done.stderr


def test_the_resolvers_report_goes_to_the_log_and_what_follows_it_to_the_terminal():
    from speedlayer.runtime.jvm_output import for_the_log

    report = [":: loading settings :: url = jar:file:/v/pyspark/jars/ivy-2.5.3.jar!/org/apache/ivy/ivysettings.xml",
              "Ivy Default Cache set to: /root/.ivy2.5.2/cache", "The jars for the packages stored in: /root/.ivy2.5.2/jars",
              "org.apache.spark#spark-sql-kafka-0-10_2.13 added as a dependency",
              ":: resolving dependencies :: org.apache.spark#spark-submit-parent-1;1.0", "\tconfs: [default]",
              "\tfound org.apache.kafka#kafka-clients;3.9.2 in central",
              "downloading https://repo1.maven.org/maven2/org/apache/kafka/kafka-clients/3.9.2/kafka-clients-3.9.2.jar ...",
              "\t[SUCCESSFUL ] org.apache.kafka#kafka-clients;3.9.2!kafka-clients.jar (120ms)",
              ":: resolution report :: resolve 967ms :: artifacts dl 36ms", "\t:: modules in use:",
              "\t|      default     |   11  |   0   |   0   |   0   ||   11  |   0   |",
              ":: retrieving :: org.apache.spark#spark-submit-parent-1", "\t0 artifacts copied, 11 already retrieved (0kB/11ms)"]
    failed = [":::: WARNINGS", "\t\tmodule not found: org.apache.spark#spark-sql-kafka-0-10_2.13;4.2.0", "",
              "\t==== nowhere: tried", ":::: ERRORS", "\tServer access error at url http://127.0.0.1:9/maven2/x.pom",
              ":: USE VERBOSE OR DEBUG MESSAGE LEVEL FOR MORE DETAILS",
              'Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: '
              'org.apache.spark#spark-sql-kafka-0-10_2.13;4.2.0: not found]',
              "\tat org.apache.spark.deploy.SparkSubmitUtils$.resolveMavenCoordinates(SparkSubmit.scala:1)"]
    report += failed
    after = ["26/12/02 08:32:04 WARN NativeCodeLoader: Unable to load native-hadoop library", "\tan indented line of a job"]
    blocks = list(for_the_log(split_blocks([*report, *after])))
    assert [line for (line,), aside in blocks if aside] == report
    assert [line for (line,), aside in blocks if not aside] == after
