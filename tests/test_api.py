"""The public API: every name importable from ``speedlayer``, imported lazily (no Spark for ``import speedlayer``)."""

import subprocess
import sys

import speedlayer


def test_every_public_name_is_there_and_is_the_one_the_builtin_jobs_use():
    from speedlayer.pipelines.base import DEAD_LETTERS, Job
    from speedlayer.runtime.handle import RunHandle, run

    missing = [name for name in speedlayer.__all__ if not hasattr(speedlayer, name)]
    assert missing == []
    assert speedlayer.Job is Job and speedlayer.DEAD_LETTERS is DEAD_LETTERS
    assert speedlayer.run is run and speedlayer.RunHandle is RunHandle
    assert (speedlayer.APPEND, speedlayer.UPDATE, speedlayer.COMPLETE) == ("append", "update", "complete")
    assert {"Job", "Output", "Params", "EventSchema", "Field", "Source", "Sink", "run", "RunHandle"} <= set(dir(speedlayer))


def test_an_unknown_name_is_an_attribute_error():
    try:
        speedlayer.Jobb  # noqa: B018
    except AttributeError as exc:
        assert str(exc) == "module 'speedlayer' has no attribute 'Jobb'"
    else:
        raise AssertionError("speedlayer.Jobb exists")


def test_import_speedlayer_and_help_import_no_spark():
    code = ("import sys, speedlayer; speedlayer.__all__; assert 'pyspark' not in sys.modules, 'import'\n"
            "from speedlayer.cli.app import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'pyspark' not in sys.modules, '--help'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--debug" in result.stdout
