"""``speedlayer jobs``: every job with its package and the plug-ins not used; ``speedlayer jobs NAME`` describes one."""

from speedlayer.cli.app import main
from tests.core.test_plugins import JOBS, ORDERS


def test_jobs_lists_builtin_and_plugin_jobs_with_their_package_and_the_broken_ones(installed, capsys):
    installed("shop-jobs", {JOBS: {"refunds": "shop_jobs:ORDERS"}}, {"shop_jobs": ORDERS})
    installed("broken-jobs", {JOBS: {"broken": "broken_jobs:JOB"}}, {"broken_jobs": "import nothing_of_that_name\n"})
    main(["jobs"])
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    # built-ins first, then by package: acme-speedlayer's orders (the example package make test installs), ours
    assert [line.split()[0] for line in lines[:6]] == ["fleet", "wordcount", "app-actions", "fraud", "orders", "refunds"]
    assert lines[0].endswith("default source: generator://; from speedlayer 0.1.0)")
    assert lines[5] == ("refunds      refunds, from a plug-in (outputs: orders, totals, "
                        "dead-letters; default source: none, give --source; from shop-jobs 1.0)")
    assert lines[6:8] == [
        "plug-ins not used (1):",
        "  job plug-in 'broken' of package broken-jobs (broken_jobs:JOB) failed to import: ModuleNotFoundError: No module "
        "named 'nothing_of_that_name': fix or reinstall broken-jobs, or uninstall it",
    ]
    assert captured.err == ""  # told once, in the listing


def test_jobs_describes_one_job_its_outputs_events_and_options(capsys):
    main(["jobs", "wordcount"])
    out = capsys.readouterr().out
    assert out.startswith("wordcount: word count three ways")
    for line in [
        "  from: package speedlayer 0.1.0 (speedlayer.pipelines.wordcount:WORDCOUNT)",
        "  default source: socket://localhost:9999",
        "    event_time           timestamp",
        "    totals *             complete (default), update; key word; stateful: running totals since the start "
        "(complete: every word; update: changed words)",
        "    lowercase            bool       default True      fold words to lower case",
        "  run settings it defaults: sliding_window=30s, slide=10s, watermark=10s",
    ]:
        assert line in out.splitlines(), line


def test_jobs_describes_a_reference_with_its_schema_limits(capsys):
    main(["jobs", "tests.runtime.shop:SHOP"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["shop: shop orders, and totals per customer and currency",
                         "  from: reference tests.runtime.shop:SHOP",
                         "  default source: none (a run gives --source)"]
    assert "    amount               double     0 to 100000" in lines
    assert "    currency             string     one of EUR, USD, GBP" in lines
    assert "  options: none" in lines
