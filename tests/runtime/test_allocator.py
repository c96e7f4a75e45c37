"""The JVM's allocator: jemalloc where installed, the user's choice and LD_PRELOAD respected."""

import os
from pathlib import Path

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.runtime import allocator
from speedlayer.runtime.allocator import allocator_env, find_jemalloc, jvm_allocator
from tests.servers import unavailable


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: "libjemalloc.so.2")


@pytest.fixture
def missing(monkeypatch):
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)


def test_jemalloc_is_preloaded_when_installed(installed):
    assert allocator_env({}) == {"LD_PRELOAD": "libjemalloc.so.2"}
    assert allocator_env({"SPEEDLAYER_ALLOCATOR": "JeMalloc"}) == {"LD_PRELOAD": "libjemalloc.so.2"}


def test_the_system_allocator_on_request_or_when_jemalloc_is_missing(installed):
    assert allocator_env({"SPEEDLAYER_ALLOCATOR": "system"}) == {}


def test_a_preload_of_the_users_own_is_left_alone(installed):
    assert allocator_env({"LD_PRELOAD": "/opt/tcmalloc.so"}) == {}


def test_missing_jemalloc_is_quiet_unless_asked_for(missing):
    assert allocator_env({}) == {}
    with pytest.raises(ConfigError, match="apt-get install libjemalloc2"):
        allocator_env({"SPEEDLAYER_ALLOCATOR": "jemalloc"})


def test_an_unknown_choice_says_the_choices():
    with pytest.raises(ConfigError, match="use auto .* jemalloc or system"):
        allocator_env({"SPEEDLAYER_ALLOCATOR": "tcmalloc"})


def test_the_preload_is_only_for_the_jvm_start(installed, monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("SPEEDLAYER_ALLOCATOR", raising=False)
    with jvm_allocator() as added:
        assert os.environ["LD_PRELOAD"] == "libjemalloc.so.2" and added == {"LD_PRELOAD": "libjemalloc.so.2"}
    assert "LD_PRELOAD" not in os.environ


def test_the_sessions_jvm_runs_on_jemalloc(spark):
    """The suite's own Spark session started through ``build_session``: its JVM has jemalloc mapped, unless
    the environment chose otherwise (``SPEEDLAYER_ALLOCATOR=system``, or a preload of its own)."""
    if find_jemalloc() is None:
        unavailable("jemalloc is not installed (tests/install_servers.sh installs libjemalloc2)")
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    mapped = "libjemalloc" in Path(f"/proc/{pid}/maps").read_text()
    ours = allocator_env()  # speedlayer preloads it: nothing in this process's environment says otherwise
    assert mapped == bool(ours or "jemalloc" in os.environ.get("LD_PRELOAD", ""))
    if ours:
        assert "LD_PRELOAD" not in os.environ  # set for the JVM's start only
