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
    (["run", "fleet", "--bogus"], "no such option --bogus for job 'fleet': its own options are --zones"),
    (["run", "fleet", "--duraton", "10"], "no such option --duraton for job 'fleet': did you mean --duration? its own"),
    (["run", "fleet", "--trip-gapp", "10"], "did you mean --trip-gap?"),
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
    # --- speeding incidents ---
    (["run", "fleet", "--sink", "incidents=console:", "--incident-after", "0s"], "--incident-after must be longer than zero"),
    (["run", "fleet", "--sink", "incidents=console:", "--incident-timeout", "0"], "--incident-timeout must be longer than zero"),
    (["run", "fleet", "--sink", "incidents=parquet:out/i", "--incident-updates"], "write it in update mode"),
    # --- allowed lateness (late data) ---
    (["run", "fleet", "--allowed-lateness", "0"], "--allowed-lateness must be longer than zero"),
    (["run", "fleet", "--allowed-lateness", "-1s"], "invalid --allowed-lateness '-1s'"),
    (["run", "wordcount", "--allowed-lateness", "30s"], "no such option --allowed-lateness for job 'wordcount'"),
    (["run", "fleet", "--trip-gap"], "--trip-gap needs a value"),
    (["run", "fleet", "--incident-updates=yes"], "--incident-updates takes no value"),
    (["run", "fleet", "--allowed-lateness", "30s", "--sink", "windows=parquet:out/w"], "use --output-mode windows=append"),
    # --- job files ---
    (["run"], "name the job to run: speedlayer run JOB (see 'speedlayer jobs'), a job file, or job: in --config"),
    (["run", "fleet", "--job-file", "orders.yaml"], "give a JOB or --job-file, not both (got 'fleet' and --job-file"),
    (["run", "a.yml", "--job-file", "b.yml"], "give a JOB or --job-file, not both"),
    (["run", "--job-file", "/nonexistent.yaml"], "job file /nonexistent.yaml does not exist"),
    (["run", "/nonexistent.yml"], "job file /nonexistent.yml does not exist"),
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


def test_a_run_refused_before_start_leaves_no_state_dir_behind_and_keeps_one_it_found(capsys, tmp_path):
    from speedlayer.testing.cluster import free_port

    source = f"kafka://127.0.0.1:{free_port()}/fastcars"
    fresh, kept = tmp_path / "fresh", tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    for state in (fresh, kept):
        code, _, err = run(capsys, "run", "fleet", "--source", source, "--state-dir", str(state))
        assert code == 2 and "error: no Kafka broker answers at 127.0.0.1:" in err, err
    assert not fresh.exists()
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt", "run.lock"]  # the lock's file: the dir was there


def help_of(capsys, *argv) -> str:
    try:
        main(list(argv))
    except SystemExit as exit_info:
        assert exit_info.code == 0
    return capsys.readouterr().out


def test_run_help_lists_the_named_jobs_own_options(capsys):
    out = help_of(capsys, "run", "fleet", "--help")
    own = out[out.index("Options of job fleet"):]
    for flag in ("--trip-gap VALUE", "--incident-updates", "--match-cell VALUE", "--rides VALUE", "--zones VALUE"):
        assert flag in own
    out = help_of(capsys, "run", "wordcount", "--help")
    own = out[out.index("Options of job wordcount"):]
    assert "--lowercase" in own and "--trip-gap" not in own


def test_a_jobs_own_flags_become_its_options_and_inputs(tmp_path, capsys):
    """--trip-gap and --rides reach the fleet's options and inputs; --option and --input say the same."""
    from speedlayer.cli.job_flags import parse_job_flags
    from speedlayer.pipelines.fleet import FLEET
    from speedlayer.pipelines.wordcount import WORDCOUNT

    assert parse_job_flags(["--trip-gap", "10min", "--no-incident-updates", "--rides", "files:///r"], FLEET) == \
        ({"trip_gap": "10min", "incident_updates": "false"}, {"rides": "files:///r"})
    assert parse_job_flags(["--lowercase"], WORDCOUNT) == ({"lowercase": "true"}, {})
