"""The example package (examples/acme-speedlayer), installed into the test venv by ``make test``: its job,
source and sink are found through their entry points, listed by the CLI, pass the connector kit, and
its job (and the job-file twin) give the same results as a stream and as a batch."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import datetime

import pytest

from speedlayer.cli.app import main
from speedlayer.pipelines import get_job, job_registry
from speedlayer.pipelines.job_file import load_job_file
from speedlayer.sinks import sink_registry
from speedlayer.sources import source_registry
from speedlayer.testing import assert_stream_equals_batch, check_sink_idempotent, check_source_replay
from tests.conftest import ROOT
from tests.examples.orders import PER_BATCH, order_lines
from tests.sinks.common import alerts_frame

EXAMPLE = ROOT / "examples" / "acme-speedlayer"
PACKAGE = "acme-speedlayer"


def test_the_docs_show_the_example_packages_code_as_it_is():
    doc = (ROOT / "docs" / "extending.md").read_text()
    for name in ("orders.py", "shopfeed.py", "jsonl.py"):
        code = (EXAMPLE / "acme_speedlayer" / name).read_text()
        assert f"```python\n{code}```" in doc, f"docs/extending.md shows another {name} than the example package's"


def test_the_environment_builds_an_editable_install_of_a_users_package(tmp_path):
    # without build isolation the environment's own setuptools builds it: an old one needs the wheel package
    package = shutil.copytree(EXAMPLE, tmp_path / "acme", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-build-isolation",
                           "--no-index", "-e", str(package)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Would install acme-speedlayer" in done.stdout, done.stderr[-2000:]


def test_its_job_source_and_sink_come_from_their_entry_points():
    assert job_registry().entries["orders"].package == PACKAGE, "run 'make test' (it installs examples/acme-speedlayer)"
    assert source_registry().entries["shopfeed"].package == PACKAGE
    assert sink_registry().entries["jsonl"].package == PACKAGE
    assert get_job("orders").dedup_key == "order_id"


@pytest.mark.parametrize(("command", "line"), [
    ("jobs", "orders       big shop orders, totals per customer, revenue per window, late orders (outputs: big, totals, "
             "revenue, dead-letters, late; default source: shopfeed://?per_batch=100; from acme-speedlayer 1.0.0)"),
    ("sources", "shopfeed://  synthetic shop orders, a pure function of their offset (replayable; modes: micro-batch; "
                "from acme-speedlayer 1.0.0)"),
    ("sinks", "jsonl:                        each micro-batch as one JSON-lines file, batch-<id>.jsonl (exactly-once; "
              "output modes: append; trigger modes: micro-batch; from acme-speedlayer 1.0.0)"),
])
def test_the_cli_lists_them_beside_the_builtins(command, line, capsys):
    main([command])
    shown = capsys.readouterr().out.splitlines()
    assert line in shown
    builtin = {"jobs": "fleet ", "sources": "generator:// ", "sinks": "postgresql: (also postgres:) "}[command]
    assert any(s.startswith(builtin) and s.endswith("from speedlayer 0.1.0)") for s in shown), shown


def test_the_connector_kit_passes_on_its_source_and_its_sink(spark, tmp_path):
    report = check_source_replay(spark, "shopfeed://?per_batch=20")
    assert (report.replayed_batch, report.replayed_rows) == (1, 20)
    folder = tmp_path / "out"
    batches = [alerts_frame(spark, 6), alerts_frame(spark, 6, first=6)]
    report = check_sink_idempotent(spark, f"jsonl:{folder}", batches, ["event_id"],
                                   read_back=lambda: spark.read.schema(batches[0].schema).json(str(folder / "batch-*.jsonl")))
    assert (report.guarantee, report.rows, report.duplicates) == ("exactly-once", 12, 0)


@pytest.mark.parametrize("variant", ["package", "job-file"])
def test_its_job_and_the_job_file_give_the_same_as_a_stream_and_as_a_batch(spark, variant):
    # late orders are not in a batch run's results, by design: leave them out
    lines = [line for line in order_lines(datetime(2026, 11, 22, 10, 0), count=120) if '"late-' not in line]
    job = get_job("orders") if variant == "package" else load_job_file(EXAMPLE / "orders.yaml")
    batches = [lines[k:k + PER_BATCH] for k in range(0, len(lines), PER_BATCH)]
    report = assert_stream_equals_batch(spark, job, batches, ["big", "revenue"], modes={"revenue": "update"},
                                        ingest_time=datetime(2026, 11, 22, 11, 0))
    assert report["big"].rows > 20 and report["revenue"].rows > 10
