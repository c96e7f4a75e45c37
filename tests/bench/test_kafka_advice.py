"""``speedlayer advise --from kafka-latency.json``: the mode that meets a p99 target at a rate, from measured cells."""

import json

import pytest

from speedlayer.bench.kafka_advice import is_kafka_results, kafka_advice


def cell(mode, rate, p99, side="speedlayer", status="ok", reason=""):
    return {"side": side, "mode": mode, "rate": rate, "p50_ms": p99 / 4, "p99_ms": None if status != "ok" else p99,
            "p999_ms": p99 * 2, "status": status, "reason": reason}


#: the shape of a recorded run on 2 cores: micro-batch ~1.2 s, continuous ~25 ms, real-time a few ms
CELLS = [cell("continuous:1s", 1000, 27), cell("continuous:1s", 10000, 22),
         cell("realtime:1min", 1000, 2), cell("realtime:1min", 10000, 9),
         cell("processing:0s", 1000, 1154), cell("processing:0s", 10000, 1315),
         cell("realtime:1min", 10000, 1, side="plain")]


@pytest.mark.parametrize("rate,target,expect,gives_up", [
    (1000, 2000, "processing:0s", ""),                     # micro-batch meets it: nothing given up
    (5000, 1200, "realtime:1min", "exactly-once"),          # judged at 10,000/s, where micro-batch took 1,315 ms
    (10000, 10, "realtime:1min", "exactly-once"),
    (10000, 5, None, ""),                                   # nothing measured that fast (plain's cell is not ours)
    (1000, None, "processing:0s", ""),                      # no target: the strongest guarantee
])
def test_the_mode_that_gives_up_least_among_those_that_meet_the_target(rate, target, expect, gives_up):
    advice = kafka_advice(CELLS, rate, target)
    assert advice.recommended == expect
    assert gives_up in advice.gives_up and (expect != "processing:0s" or advice.gives_up == "")
    assert [v.mode for v in advice.modes] == ["continuous:1s", "realtime:1min", "processing:0s"]


def test_micro_batch_with_the_fast_dedup_is_a_mode_of_its_own_preferred_to_real_time():
    """Measured with --dedup exact and fast: fast meets a target exact misses, and gives up less than real-time."""
    cells = CELLS + [{**cell("processing:0s", 1000, 640), "dedup": "fast"},
                     {**cell("processing:0s", 1000, 1154), "dedup": "exact"}]
    advice = kafka_advice(cells, 1000, 1000)
    assert advice.recommended == "processing:0s --dedup fast"
    assert "same copy of a re-sent ping on every replay" in advice.gives_up
    verdicts = {v.mode: v for v in advice.modes}
    assert not verdicts["processing:0s"].meets and verdicts["processing:0s --dedup fast"].meets
    assert kafka_advice(cells, 1000, 2000).recommended == "processing:0s"  # both meet it: exact gives up nothing
    assert verdicts["processing:0s --dedup fast"].expected_latency.startswith("p50 160 / p99 640")


def test_a_rate_above_every_measured_one_is_judged_on_the_highest_and_says_so():
    verdicts = {v.mode: v for v in kafka_advice(CELLS, 50_000, 30).modes}
    assert verdicts["continuous:1s"].meets and "measured up to 10,000/s only" in verdicts["continuous:1s"].why


def test_a_stateful_output_is_left_to_micro_batch_and_a_cell_that_failed_meets_nothing():
    advice = kafka_advice(CELLS, 1000, 50, stateful=True)
    assert advice.recommended is None and not any(v.meets for v in advice.modes)
    assert "keeps state" in {v.mode: v for v in advice.modes}["realtime:1min"].why
    failed = kafka_advice([cell("realtime:1min", 1000, 0, status="failed", reason="no connector")], 1000, 50)
    assert failed.recommended is None and "no connector" in failed.modes[0].why


def test_kafka_results_are_told_from_a_bench_json():
    assert is_kafka_results({"cells": CELLS})
    assert not is_kafka_results({"cells": [{"output": "windows", "mode": "processing:0s", "p99_ms": 5, "batches": []}]})
    assert not is_kafka_results({"cells": []})


def test_advise_from_a_kafka_latency_json_names_the_trigger_and_what_it_gives_up(capsys, tmp_path):
    from speedlayer.cli.app import main

    path = tmp_path / "kafka-latency.json"
    path.write_text(json.dumps({"bootstrap": "localhost:9092", "cells": CELLS}))
    main(["advise", "--rate", "10000", "--latency", "50ms", "--output", "alerts", "--from", str(path)])
    first, *table = capsys.readouterr().out.splitlines()  # the line is never wrapped; the table fits the terminal
    assert first.startswith("for 10,000 events/s and a p99 of at most 50 ms: --trigger realtime:1min")
    assert first.endswith("it gives up exactly-once, and state beyond the allowlist")
    assert table[0].startswith("modes at 10,000 events/s")
    main(["advise", "--rate", "10000", "--latency", "1ms", "--output", "alerts", "--from", str(path)])
    assert "no measured mode meets a p99 of at most 1 ms" in capsys.readouterr().out


@pytest.mark.parametrize("content,match", [
    ([1, 2], "is not a bench.json or kafka-latency.json"),
    ({"cells": [cell("realtime:1min", 1000, 3, side="plain")]}, "no cell of speedlayer's side"),
])
def test_a_results_file_advise_cannot_read_is_one_line(capsys, tmp_path, content, match):
    from speedlayer.cli.app import main

    path = tmp_path / "results.json"
    path.write_text(json.dumps(content))
    with pytest.raises(SystemExit) as exit_info:
        main(["advise", "--rate", "1000", "--from", str(path)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(lines) == 1 and match in lines[0], lines


def test_a_rate_measured_in_several_rounds_is_judged_on_its_median_round():
    """Three rounds of real-time at 1,000/s: one slow round neither decides alone, nor hides behind a fast one."""
    rounds = [cell("realtime:1min", 1000, p99) for p99 in (3, 40, 8)] + [cell("processing:0s", 1000, 1154)]
    assert kafka_advice(rounds, 1000, 10).recommended == "realtime:1min"
    assert kafka_advice(rounds, 1000, 5).recommended is None
    expected = next(v.expected_latency for v in kafka_advice(rounds, 1000, 10).modes if v.mode == "realtime:1min")
    assert "/ p99 8 /" in expected


def test_a_round_that_did_not_run_leaves_the_median_to_those_that_did():
    rounds = [cell("realtime:1min", 1000, 0, status="failed", reason="broker gone"), cell("realtime:1min", 1000, 4)]
    assert kafka_advice(rounds, 1000, 10).recommended == "realtime:1min"


def test_advise_from_a_kafka_latency_json_judges_the_alerts_it_measured_unless_told_otherwise(capsys, tmp_path):
    """Without --output the file's own output (the alerts) is judged; --output windows asks of an output
    with state, which only micro-batch runs."""
    from speedlayer.cli.app import main

    path = tmp_path / "kafka-latency.json"
    path.write_text(json.dumps({"cells": CELLS}))
    main(["advise", "--rate", "10000", "--latency", "50ms", "--from", str(path)])
    assert capsys.readouterr().out.startswith("for 10,000 events/s and a p99 of at most 50 ms: --trigger realtime:1min")
    main(["advise", "--rate", "10000", "--latency", "50ms", "--output", "windows", "--from", str(path)])
    told = capsys.readouterr().out
    assert told.startswith("no measured mode meets") and "keeps state" in told
