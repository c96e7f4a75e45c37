"""The CLI's contract for user mistakes: exit 2, one line on stderr, no traceback."""

import pytest

from speedlayer.cli.app import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.mark.parametrize("argv,match", [
    (["run", "nope"], "unknown job 'nope'"),
    (["run", "fleet", "--bogus"], "No such option: --bogus"),
    (["run", "fleet", "--trigger", "soon"], "unknown trigger 'soon'"),
    (["run", "fleet", "--max-events", "many"], "--max-events"),
    (["run", "fleet", "--source", "kafka//broker"], "has no scheme"),
    (["run", "fleet", "--source", "generator://?rate=0"], "option 'rate'"),
    (["run", "fleet", "--sink", "windows"], "is not NAME=URI"),
    (["run", "fleet", "--sink", "windows=parquet:out/w", "--output-mode", "update"], "takes append mode only"),
    (["run", "fleet", "--duration", "5", "--max-events", "10"], "not both"),
    (["run", "fleet", "--config", "/nonexistent.yaml"], "config file /nonexistent.yaml does not exist"),
    (["run", "fleet", "--watermark", "soon"], "invalid --watermark"),
    (["run", "fleet", "--max-ahead", "soon"], "invalid --max-ahead 'soon'"),
    (["run", "fleet", "--max-ahead", "2d"], "--max-ahead 2d is over a day"),
    (["run", "fleet", "--master", "spark://h:7077", "--ship", "/no/env.tar.gz"], "--ship /no/env.tar.gz: no such archive"),
    # --- speeding incidents (issue 4) ---
    (["run", "fleet", "--sink", "incidents=console:", "--incident-after", "0s"], "--incident-after must be longer than zero"),
    (["run", "fleet", "--sink", "incidents=console:", "--incident-timeout", "0"], "--incident-timeout must be longer than zero"),
    (["run", "fleet", "--sink", "incidents=parquet:out/i", "--incident-updates"], "write it in update mode"),
    # --- allowed lateness (issue 4: late data) ---
    (["run", "fleet", "--allowed-lateness", "0"], "--allowed-lateness must be longer than zero"),
    (["run", "fleet", "--allowed-lateness", "-1s"], "invalid --allowed-lateness '-1s'"),
    (["run", "wordcount", "--allowed-lateness", "30s"], "--allowed-lateness only applies to the fleet job"),
    (["run", "fleet", "--allowed-lateness", "30s", "--sink", "windows=parquet:out/w"], "use --output-mode windows=append"),
])
def test_user_mistakes_exit_2_with_one_line(capsys, argv, match):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err + out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert match in lines[0]


def test_jobs_lists_one_line_per_job(capsys):
    main(["jobs"])
    out = capsys.readouterr().out
    assert out.startswith("fleet ") and "windows, sliding, alerts, dead-letters" in out


def test_a_spark_master_where_nothing_listens_is_one_line_at_once(capsys):
    from speedlayer.testing.cluster import free_port

    code, out, err = run(capsys, "run", "fleet", "--master", f"spark://127.0.0.1:{free_port()}")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 3 and "Traceback" not in err + out
    assert len(lines) == 1 and lines[0].startswith("error: no Spark master answers at 127.0.0.1:")
    assert "start it (docs/cluster.md, Standalone) or fix --master" in lines[0]
