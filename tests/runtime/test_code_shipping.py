"""Which of a job's own modules a run ships to the Python workers (zipped, for addPyFile), decided without a cluster."""

import dataclasses
import importlib
import sys
import zipfile
import zipimport

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.fleet import FLEET
from speedlayer.runtime.code_shipping import job_modules, plan_code_shipping
from tests.runtime.shop import SHOP

CLUSTER = "spark://10.0.0.1:7077"


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """A job of a user's plain directory on sys.path (no distribution): ``ship_orders.py`` and package ``ship_pkg``."""
    code = tmp_path / "code"
    (code / "ship_pkg" / "__pycache__").mkdir(parents=True)
    (code / "ship_pkg" / "__init__.py").write_text("")
    (code / "ship_pkg" / "jobs.py").write_text("def pipeline(events, params):\n    return {}\n")
    (code / "ship_pkg" / "__pycache__" / "jobs.cpython-311.pyc").write_bytes(b"stale")
    (code / "ship_orders.py").write_text("def pipeline(events, params):\n    return {}\n")
    monkeypatch.syspath_prepend(str(code))
    importlib.invalidate_caches()
    yield {name: dataclasses.replace(SHOP, pipeline=importlib.import_module(module).pipeline)
           for name, module in (("file", "ship_orders"), ("package", "ship_pkg.jobs"))}
    for name in ("ship_orders", "ship_pkg", "ship_pkg.jobs"):
        sys.modules.pop(name, None)


def test_speedlayers_own_jobs_need_nothing():
    assert job_modules(FLEET) == []
    assert plan_code_shipping(FLEET, CLUSTER, "auto") == plan_code_shipping(FLEET, "local[2]", "auto")
    assert plan_code_shipping(FLEET, CLUSTER, "auto").py_files == ()


def test_a_module_from_a_plain_file_is_zipped_for_the_executors(user_code, tmp_path):
    shipped = plan_code_shipping(user_code["file"], CLUSTER, "auto", folder=tmp_path / "cache", available=set())
    (zipped,) = shipped.py_files
    assert zipfile.ZipFile(zipped).namelist() == ["ship_orders.py"]
    assert zipimport.zipimporter(str(zipped)).find_spec("ship_orders") is not None
    assert shipped.note == f"shipping the job's code ship_orders ({tmp_path}/code/ship_orders.py) to the executors (addPyFile)"
    again = plan_code_shipping(user_code["file"], CLUSTER, "auto", folder=tmp_path / "cache", available=set())
    assert again.py_files == (zipped,)  # built once per content


def test_a_package_is_zipped_whole_without_its_caches(user_code, tmp_path):
    shipped = plan_code_shipping(user_code["package"], CLUSTER, "auto", folder=tmp_path / "cache", available=set())
    assert sorted(zipfile.ZipFile(shipped.py_files[0]).namelist()) == ["ship_pkg/__init__.py", "ship_pkg/jobs.py"]


def test_local_mode_ships_plain_modules_too_without_a_note(user_code, tmp_path):
    # a Python worker sees the driver's environment, not the sys.path entries the driver added
    shipped = plan_code_shipping(user_code["file"], "local[2]", "auto", folder=tmp_path / "cache")
    assert len(shipped.py_files) == 1 and shipped.note is None


def test_a_module_the_executors_already_have_is_not_shipped(user_code, tmp_path):
    assert plan_code_shipping(user_code["file"], CLUSTER, "auto", folder=tmp_path, available={"ship_orders"}).py_files == ()
    assert list(tmp_path.glob("*.zip")) == []


def test_ship_none_ships_nothing_and_names_what_executors_must_import(user_code, tmp_path):
    shipped = plan_code_shipping(user_code["package"], CLUSTER, "none", folder=tmp_path)
    assert shipped.py_files == ()
    assert shipped.note == "--ship none: executors must import ship_pkg (the job's code) themselves"


def test_a_compiled_module_is_refused_before_start_with_the_fix(tmp_path, monkeypatch):
    (tmp_path / "ship_native.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))

    def pipeline(events, params):
        return {}

    pipeline.__module__ = "ship_native"
    with pytest.raises(ConfigError, match=r"the job's module ship_native \(.*\.so\) cannot be shipped to executors as a "
                                          r"zip: make it an installed package that depends on speedlayer"):
        plan_code_shipping(dataclasses.replace(SHOP, pipeline=pipeline), CLUSTER, "auto", folder=tmp_path, available=set())


def test_functions_of_main_are_pickled_by_value_and_need_nothing(tmp_path):
    def pipeline(events, params):
        return {}

    pipeline.__module__ = "__main__"
    assert plan_code_shipping(dataclasses.replace(SHOP, pipeline=pipeline), CLUSTER, "auto", available=set()).py_files == ()
