"""Registries with plug-ins: jobs, sources and sinks of installed packages, found by entry point.

Each test installs small distributions (a ``*.dist-info`` with METADATA and entry_points.txt beside
its modules) on ``sys.path``; nothing is mocked.
"""

import pytest
import tomllib

from speedlayer.core import plugins
from speedlayer.core.errors import ConfigError
from speedlayer.pipelines import BUILTIN_JOBS, get_job, job_registry
from speedlayer.sinks import BUILTIN_SINKS, open_sink, sink_registry
from speedlayer.sources import BUILTIN_SOURCES, open_source, source_registry
from speedlayer.sources.generator_kinds import BUILTIN_KINDS
from tests.conftest import ROOT

JOBS = "speedlayer.jobs"
#: a job of a user's own package, written against the public API only
ORDERS = """
import dataclasses
from tests.runtime.shop import SHOP
ORDERS = dataclasses.replace(SHOP, name="refunds", summary="refunds, from a plug-in")
FLEET = dataclasses.replace(SHOP, name="fleet")
def not_a_job(events, params):
    return {}
"""
SOURCE = """
from speedlayer import Source
class AcmeSource(Source):
    scheme = "acme"
    def read_stream(self, spark, max_events=None):
        raise NotImplementedError
class Unfinished(Source):
    scheme = "half"
"""
SINK = """
from speedlayer import APPEND, AT_LEAST_ONCE, Sink
class AcmeSink(Sink):
    scheme = "acme"
    guarantee = AT_LEAST_ONCE
    modes = (APPEND,)
    def start(self, writer, df, target):
        return writer.format("noop").start()
"""


def test_a_plugin_job_is_found_beside_the_builtins_with_its_package(installed):
    installed("shop-jobs", {JOBS: {"refunds": "shop_jobs:ORDERS"}}, {"shop_jobs": ORDERS})
    assert get_job("refunds").summary == "refunds, from a plug-in"
    entries = job_registry().entries
    assert list(entries)[:4] == ["fleet", "wordcount", "app-actions", "fraud"]
    assert entries["refunds"].package == "shop-jobs" and entries["fleet"].package == "speedlayer"
    assert job_registry().problems == []


def test_a_broken_plugin_is_one_line_on_stderr_and_breaks_nothing_else(installed, capsys):
    installed("shop-jobs", {JOBS: {"refunds": "shop_jobs:ORDERS", "function": "shop_jobs:not_a_job",
                                   "renamed": "shop_jobs:ORDERS"}}, {"shop_jobs": ORDERS})
    installed("broken-jobs", {JOBS: {"broken": "broken_jobs:JOB"}}, {"broken_jobs": "X = 1 / 0\n"})
    installed("gone-jobs", {JOBS: {"gone": "gone_jobs_not_there:JOB"}})
    refused = "from speedlayer.core.errors import ConfigError\nraise ConfigError(\"dedup_key 'id' is not a field\")\n"
    installed("bad-key-jobs", {JOBS: {"keyed": "bad_key_jobs:JOB"}}, {"bad_key_jobs": refused})

    assert get_job("refunds").name == "refunds"
    assert get_job("fleet").name == "fleet"
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "warning: job plug-in 'keyed' of package bad-key-jobs (bad_key_jobs:JOB) was refused while importing: "
        "dedup_key 'id' is not a field: fix it in bad-key-jobs, or uninstall it",
        "warning: job plug-in 'broken' of package broken-jobs (broken_jobs:JOB) failed to import: ZeroDivisionError: "
        "division by zero: fix or reinstall broken-jobs, or uninstall it",
        "warning: job plug-in 'gone' of package gone-jobs (gone_jobs_not_there:JOB) failed to import: "
        "ModuleNotFoundError: No module named 'gone_jobs_not_there': fix or reinstall gone-jobs, or uninstall it",
        "warning: job plug-in 'function' of package shop-jobs (shop_jobs:not_a_job) is a function, not a speedlayer "
        "Job: point the entry point at the right object, or uninstall shop-jobs",
        "warning: job plug-in 'renamed' of package shop-jobs (shop_jobs:ORDERS) is the Job named 'refunds', not "
        "'renamed': a job's entry-point name must be its name: point the entry point at the right object, or "
        "uninstall shop-jobs",
    ]
    get_job("wordcount")
    assert capsys.readouterr().err == ""  # said once per process
    with pytest.raises(ConfigError, match=r"unknown job 'broken': choose one of fleet, wordcount, app-actions, fraud, .*refunds"):
        get_job("broken")


def test_a_name_two_packages_declare_goes_to_neither_and_the_builtin_wins_its_own(installed):
    installed("shop-jobs", {JOBS: {"refunds": "shop_jobs:ORDERS", "fleet": "shop_jobs:FLEET"}}, {"shop_jobs": ORDERS})
    installed("other-jobs", {JOBS: {"refunds": "other_jobs:ORDERS"}}, {"other_jobs": ORDERS})

    registry = job_registry()
    assert "refunds" not in registry.entries
    assert registry.entries["fleet"].package == "speedlayer"
    problems = sorted(str(p) for p in registry.problems)
    assert len(problems) == 2
    assert "job plug-in 'fleet' of package shop-jobs (shop_jobs:FLEET) has the name of speedlayer's built-in job: it is " \
           "not used; rename its entry point in shop-jobs's pyproject.toml" in problems
    clash = [p for p in problems if "'refunds'" in p and " and " in p]
    assert clash == ["job plug-in 'refunds' of packages other-jobs and shop-jobs (other_jobs:ORDERS, shop_jobs:ORDERS) is "
                     "declared by each of them, so neither is used: uninstall one of them, or rename its entry point"]


def test_plugin_sources_and_sinks_are_opened_by_their_scheme(installed):
    installed("acme-io", {"speedlayer.sources": {"acme": "acme_io:AcmeSource", "half": "acme_io:Unfinished",
                                                         "wrong": "acme_io:AcmeSource"},
                                  "speedlayer.sinks": {"acme": "acme_sink:AcmeSink", "kafka": "acme_sink:AcmeSink"}},
              {"acme_io": SOURCE, "acme_sink": SINK})

    assert type(open_source("acme://host/feed")).__name__ == "AcmeSource"
    assert open_sink("acme:out").guarantee == "at-least-once"
    assert type(open_sink("kafka://h:9092/t")).__name__ == "KafkaSink"  # the built-in keeps its scheme
    problems = [str(p) for p in source_registry().problems]
    assert any("'half'" in p and "is an abstract source (it lacks read_stream)" in p for p in problems)
    assert any("'wrong'" in p and "has scheme 'acme', not 'wrong': the entry-point name is the URI scheme" in p
               for p in problems)
    assert [p.name for p in sink_registry().problems] == ["kafka"]
    with pytest.raises(ConfigError, match=r"unknown source scheme 'nope'.*socket://localhost:9999.*, acme://(, shopfeed://)?$"):
        open_source("nope://x")


def test_without_speedlayers_own_metadata_the_builtins_stand_in():
    check = lambda name, value: None  # noqa: E731
    alone = plugins.load("job", BUILTIN_JOBS, check, candidates=[])
    assert list(alone.entries) == list(BUILTIN_JOBS) and {e.package for e in alone.entries.values()} == {"speedlayer"}
    other = plugins.Candidate("refunds", "tests.runtime.shop:SHOP", "shop-jobs")
    with_other = plugins.load("job", BUILTIN_JOBS, check, candidates=[other])
    assert list(with_other.entries) == [*BUILTIN_JOBS, "refunds"] and with_other.problems == []


def test_speedlayer_declares_its_builtins_as_entry_points_exactly():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared == {JOBS: BUILTIN_JOBS, "speedlayer.sources": BUILTIN_SOURCES, "speedlayer.sinks": BUILTIN_SINKS,
                        "speedlayer.generator_kinds": BUILTIN_KINDS}
    installed = {c.name: c.target for c in plugins.declared(JOBS) if c.package == "speedlayer"}
    assert installed == BUILTIN_JOBS, "reinstall speedlayer (make .venv/.installed-dev) to refresh its entry points"


def test_import_target_and_error_line():
    assert plugins.import_target("speedlayer.core.modes:OUTPUT_MODES") == ("append", "update", "complete")
    assert plugins.import_target("os:path.sep") == "/"
    assert plugins.error_line(SyntaxError("invalid syntax (jobs.py, line 3)")) == "SyntaxError: invalid syntax (jobs.py, line 3)"
    assert plugins.error_line(KeyError()) == "KeyError"
