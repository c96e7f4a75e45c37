"""``module:attribute`` job references from the command line: each mistake is one line, exit 2, no traceback."""

import importlib
import sys

import pytest

from speedlayer.cli.app import main
from speedlayer.pipelines import get_job
from speedlayer.runtime.shipping import CACHE_ENV

JOBS_MODULE = """
import dataclasses
from tests.runtime.shop import SHOP
ORDERS = dataclasses.replace(SHOP, name="orders")
def orders(events, params):
    return {}
"""


@pytest.fixture
def here(tmp_path, monkeypatch):
    """The test's directory as the current one, holding the user's job files; sys.path as it was after."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))  # where a planned run zips the job's code
    before = set(sys.modules)

    def write(name: str, text: str) -> None:
        (tmp_path / f"{name}.py").write_text(text)
        importlib.invalidate_caches()

    yield write
    for name in set(sys.modules) - before:
        if (getattr(sys.modules[name], "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def one_line_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert exit_info.value.code == 2, err
    assert "Traceback" not in out + err and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_reference_names_a_job_in_a_file_of_the_current_directory(here, capsys):
    here("ref_jobs_a", JOBS_MODULE)
    assert get_job("ref_jobs_a:ORDERS").name == "orders"
    # it is planned like any job: its outputs are the ones the run checks the sinks against
    line = one_line_error(capsys, "run", "ref_jobs_a:ORDERS", "--sink", "nope=console:")
    assert line == "error: job 'orders' has no output 'nope': its outputs are orders, totals, dead-letters"


@pytest.mark.parametrize("reference,expected", [
    ("ref_jobs_nowhere:ORDERS", "error: job reference ref_jobs_nowhere:ORDERS: no module named 'ref_jobs_nowhere' is "
                                "installed or in the current directory ({cwd}): install the package that holds it, or "
                                "run from the directory that holds it"),
    ("ref_jobs_b.sub:ORDERS", "error: job reference ref_jobs_b.sub:ORDERS: no module named 'ref_jobs_b.sub' is installed "
                              "or in the current directory ({cwd}): install the package that holds it, or run from the "
                              "directory that holds it"),
    ("ref_jobs_b:ORDRES", "error: job reference ref_jobs_b:ORDRES: module ref_jobs_b has no attribute 'ORDRES' "
                          "(its jobs: SHOP, ORDERS): fix the name after ':'"),
    ("ref_jobs_b:orders", "error: job reference ref_jobs_b:orders: orders is a function, not a speedlayer Job: point at "
                          "a Job object (from speedlayer import Job; ORDERS = Job(...))"),
    ("ref jobs:ORDERS", "error: job reference 'ref jobs:ORDERS' is not MODULE:ATTRIBUTE (e.g. my_package.jobs:ORDERS), "
                        "nor a registered job (see 'speedlayer jobs')"),
    ("ref_jobs_b:", "error: job reference 'ref_jobs_b:' is not MODULE:ATTRIBUTE (e.g. my_package.jobs:ORDERS), "
                    "nor a registered job (see 'speedlayer jobs')"),
])
def test_a_wrong_reference_says_what_to_fix(here, capsys, tmp_path, reference, expected):
    here("ref_jobs_b", JOBS_MODULE)
    assert one_line_error(capsys, "run", reference) == expected.format(cwd=tmp_path)


@pytest.mark.parametrize("text,expected", [
    ("RATE = 1 / 0\n", "module ref_jobs_c failed while importing: ZeroDivisionError: division by zero: fix the module "
                       "(--debug shows the traceback)"),
    ("import ref_jobs_missing_dependency\n", "module ref_jobs_c failed while importing: ModuleNotFoundError: No module "
                                             "named 'ref_jobs_missing_dependency': install what it imports"),
    ("def broken(:\n", "module ref_jobs_c failed while importing: SyntaxError: invalid syntax"),
])
def test_a_module_that_fails_while_importing_is_told_apart_from_a_missing_one(here, capsys, text, expected):
    here("ref_jobs_c", text)
    line = one_line_error(capsys, "run", "ref_jobs_c:JOB")
    assert line.startswith(f"error: job reference ref_jobs_c:JOB: {expected}")


def test_a_config_files_job_may_be_a_reference(here, capsys, tmp_path):
    here("ref_jobs_d", JOBS_MODULE)
    (tmp_path / "orders.yaml").write_text("job: ref_jobs_d:ORDERS\nsinks: {totals: 'parquet:out/t'}\n")
    line = one_line_error(capsys, "run", "--config", "orders.yaml")
    assert line.startswith("error: sink parquet: takes append mode only, not complete (output 'totals')")
    (tmp_path / "wrong.yaml").write_text("job: ref_jobs_d:NOTHING\n")
    line = one_line_error(capsys, "run", "--config", "wrong.yaml")
    assert "module ref_jobs_d has no attribute 'NOTHING'" in line
    line = one_line_error(capsys, "run")
    assert line.startswith("error: name the job to run: speedlayer run JOB (see 'speedlayer jobs'), a job file")


def test_the_debug_option_shows_the_import_errors_traceback(here, capsys, monkeypatch):
    here("ref_jobs_e", "def rate():\n    return 1 / 0\nRATE = rate()\n")
    monkeypatch.setenv("SPEEDLAYER_DEBUG", "1")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "ref_jobs_e:JOB"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith("error: job reference ref_jobs_e:JOB: module ref_jobs_e failed while importing: "
                          "ZeroDivisionError: division by zero")
    assert "Traceback (most recent call last):" in err and 'ref_jobs_e.py", line 2, in rate' in err
    assert "The above exception was the direct cause of the following exception:" in err
