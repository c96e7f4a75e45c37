"""``speedlayer bench`` end to end, in its smallest form: the shape of its output, not its timings."""

import json

import pytest

QUICKER = ["--mode", "processing:0s", "--mode", "continuous:1s", "--mode", "realtime:", "--rate", "500",
           "--cell-seconds", "3", "--warmup-seconds", "0.5", "--window", "1s", "--watermark", "0s"]


@pytest.mark.slow
def test_bench_writes_table_json_and_plots_and_reports_impossible_modes(run_cli, tmp_path):
    out = tmp_path / "bench"
    done = run_cli("bench", "--out", str(out), *QUICKER, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    results = json.loads((out / "bench.json").read_text())
    assert {"benchmark", "config", "machine", "cells", "sustained", "batch_cost", "elapsed_s"} <= set(results)
    cells = {(c["output"], c["mode"]): c for c in results["cells"]}
    assert set(cells) == {(o, m) for o in ("windows", "alerts") for m in ("processing:0s", "continuous:1s", "realtime:")}
    assert cells["windows", "continuous:1s"]["status"] == "not supported"
    assert "keeps state" in cells["windows", "continuous:1s"]["reason"]
    for output in ("windows", "alerts"):
        assert cells[output, "realtime:"]["status"] == "not supported"
    assert "keeps state (windows), which real-time mode cannot do" in cells["windows", "realtime:"]["reason"]
    assert "Kafka" in cells["alerts", "realtime:"]["reason"]
    measured = [cells["windows", "processing:0s"], cells["alerts", "processing:0s"], cells["alerts", "continuous:1s"]]
    for c in measured:
        assert c["status"] == "ok", c["reason"]
        assert c["events"] > 0 and c["peak_rss_mb"] > 0
        # None: every event of the cell was fed before its measured span began (a machine too busy to keep up)
        assert c["cpu_s_per_million_events"] is None or c["cpu_s_per_million_events"] > 0
        if c["rows_measured"]:
            assert c["p50_ms"] <= c["p95_ms"] <= c["p99_ms"] <= c["max_ms"]
        else:  # a slow machine may close no 1 s window within a 3 s cell: the table says what to do
            assert c["output"] == "windows" and "no rows: longer cells" in done.stdout, c
    assert cells["alerts", "processing:0s"]["rows_measured"] > 0 and cells["alerts", "continuous:1s"]["rows_measured"] > 0
    assert any(c["cpu_s_per_million_events"] for c in measured)
    assert cells["windows", "processing:0s"]["batches"] and not cells["alerts", "continuous:1s"]["batches"]
    assert set(results["sustained"]) == {"windows", "alerts"}

    for png in ("latency_vs_throughput.png", "batch_time_vs_size.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = done.stdout
    for row in ("windows", "alerts", "processing:0s", "continuous:1s", "realtime:", "not supported [1]",
                "not supported [2]", "sustained throughput"):
        assert row in table
    assert "keeps state" in table and "Kafka only" in table  # the reasons, under the table


def test_bench_and_advise_refuse_bad_options(capsys):
    from speedlayer.cli.app import main

    for argv, match in ((["bench", "--output", "sliding"], "not 'sliding'"),
                        (["bench", "--mode", "soon"], "unknown trigger"),
                        (["bench", "--kafka", "broker"], "give the broker as host:port"),
                        (["bench", "--kafka", "127.0.0.1:1"], "no Kafka broker answers at 127.0.0.1:1"),
                        (["bench", "--kafka", "127.0.0.1:1", "--mode", "soon"], "unknown trigger"),
                        (["bench", "--kafka", "127.0.0.1:1", "--rate", "0"], "--rate and --cell-seconds"),
                        (["bench", "--kafka", "127.0.0.1:1", "--dedup", "slow"], "--dedup 'slow': choose exact or fast"),
                        (["bench", "--dedup", "fast"], "give --kafka HOST:PORT with it"),
                        (["bench", "--rounds", "3"], "--rounds repeats the cells of a Kafka bench"),
                        (["bench", "--kafka", "127.0.0.1:1", "--rounds", "0"], "--rounds 0: measure each cell at least once"),
                        (["bench", "--kafka", "127.0.0.1:1", "--dedup", "fast", "--mode", "continuous:1s"],
                         "add a --mode processing:0s"),
                        (["advise", "--rate", "1000", "--headroom", "2"], "--headroom"),
                        (["advise", "--rate", "1000", "--size", "5000"], "two different --size"),
                        (["advise", "--rate", "1000", "--from", "/nonexistent/bench.json"], "does not exist")):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, argv
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and match in lines[0], (argv, err)


@pytest.mark.parametrize("batches,expect", [
    ([[5000, 470], [20000, 530], [60000, 690]], "maxRecordsPerTrigger="),  # 450 ms + 4 µs/event
    ([[5000, 700], [20000, 690]], "no maxRecordsPerTrigger"),  # a noisy fit: no cost per event
])
def test_advise_from_a_bench_json_prints_a_trigger_and_the_modes(capsys, tmp_path, batches, expect):
    from speedlayer.cli.app import main

    results = {"cells": [{"output": "windows", "batches": batches}]}
    (tmp_path / "bench.json").write_text(json.dumps(results))
    main(["advise", "--rate", "20000", "--latency", "5s", "--from", str(tmp_path / "bench.json"), "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "--trigger processing:" in out and expect in out
    for mode in ("micro-batch", "continuous:1s", "realtime", "available-now"):
        assert mode in out
    assert (tmp_path / "batch_time_vs_size.png").read_bytes()[:4] == b"\x89PNG"
