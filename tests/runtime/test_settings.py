import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.settings import RunSettings, build_settings, load_yaml, output_modes, pairs


def test_flags_win_over_the_config_file_key_by_key(tmp_path):
    file = tmp_path / "fleet.yaml"
    file.write_text(
        "job: fleet\nsource: generator://?seed=1\ntrigger: processing:5s\n"
        "sinks:\n  windows: parquet:out/w\n  alerts: parquet:out/a\n"
        "output-mode: append\nconf:\n  spark.sql.shuffle.partitions: 4\n  spark.x.flag: true\n"
    )
    settings = build_settings(load_yaml(str(file)), {
        "job": "fleet", "trigger": "processing:1s", "sinks": {"alerts": "console:"},
        "output_mode": {"windows": "update"}, "conf": {}, "source": None,
    })
    assert settings.trigger == "processing:1s"
    assert settings.source == "generator://?seed=1"
    assert settings.sinks == {"windows": "parquet:out/w", "alerts": "console:"}
    assert settings.output_mode == {"*": "append", "windows": "update"}
    assert settings.conf == {"spark.sql.shuffle.partitions": "4", "spark.x.flag": "true"}


def test_unknown_setting_and_bad_yaml_are_one_line_errors(tmp_path):
    file = tmp_path / "bad.yaml"
    file.write_text("job: fleet\nspeed: 3\n")
    from speedlayer.runtime.plan import plan_run

    with pytest.raises(ConfigError, match="unknown setting 'speed': known settings are job, .*; job 'fleet' options are"):
        plan_run(build_settings(load_yaml(str(file)), {}))
    file.write_text("job: [fleet\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_yaml(str(file))
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(str(tmp_path / "missing.yaml"))


def test_pairs_and_output_modes():
    assert pairs(["a=1", "b=x=y"], "--conf", "key=value") == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError, match="--sink 'windows' is not NAME=URI"):
        pairs(["windows"], "--sink", "NAME=URI")
    with pytest.raises(ConfigError, match="twice"):
        pairs(["a=1", "a=2"], "--conf", "key=value")
    assert output_modes(["update", "windows=append"]) == {"*": "update", "windows": "append"}


def test_secrets_are_masked_in_the_printed_settings():
    settings = build_settings({}, {"job": "fleet", "sinks": {"windows": "postgresql://u:pw@h/db"},
                                   "conf": {"spark.some.password": "pw"}})
    masked = settings.masked()
    assert "pw" not in str(masked)


def test_allowed_lateness_from_the_config_file_and_the_flag_wins(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text("job: fleet\nallowed-lateness: 30s\n")
    assert build_settings(load_yaml(str(path)), {}).options["allowed_lateness"] == "30s"
    flag = {"options": {"allowed_lateness": "1min"}}  # what --allowed-lateness 1min gives
    assert build_settings(load_yaml(str(path)), flag).options["allowed_lateness"] == "1min"
    assert "allowed_lateness" not in build_settings({"job": "fleet"}, {}).options  # off


def test_max_ahead_from_the_config_file_or_the_flag_else_a_fifth_of_the_watermark(tmp_path):
    from speedlayer.runtime.plan import plan_run

    path = tmp_path / "fleet.yaml"
    path.write_text("job: fleet\nmax-ahead: 500ms\n")
    assert plan_run(build_settings(load_yaml(str(path)), {})).job.schema.max_ahead_ms == 500
    assert plan_run(build_settings(load_yaml(str(path)), {"max_ahead": "2s"})).job.schema.max_ahead_ms == 2000
    fleet = plan_run(build_settings({"job": "fleet"}, {"watermark": "30s", "sinks": {"matches": "console:"}}))
    assert fleet.job.schema.max_ahead_ms == 6000 and fleet.job.inputs["rides"].max_ahead_ms == 6000  # both streams
    assert plan_run(build_settings({"job": "app-actions"}, {})).job.schema.max_ahead_ms == 120_000  # its watermark: 10min


def test_a_schemas_own_max_ahead_holds_unless_the_run_gives_one():
    from dataclasses import replace

    from speedlayer.decode.text import TEXT_LINE
    from speedlayer.pipelines.wordcount import WORDCOUNT
    from speedlayer.runtime.plan import plan_run

    mine = replace(WORDCOUNT, name="strict-words", schema=replace(TEXT_LINE, max_ahead_ms=250))
    assert plan_run(build_settings({"job": "strict-words"}, {}), job=mine).job.schema.ahead_ms == 250
    assert plan_run(build_settings({"job": "strict-words"}, {"max_ahead": "2s"}), job=mine).job.schema.ahead_ms == 2000
    assert plan_run(build_settings({"job": "wordcount"}, {"watermark": "30s"})).job.schema.ahead_ms == 6000  # none of its own


def test_dedup_is_exact_unless_fast_is_asked_for_and_other_words_are_refused(tmp_path):
    from speedlayer.runtime.plan import plan_run

    path = tmp_path / "fleet.yaml"
    path.write_text("job: fleet\ndedup: fast\n")
    assert plan_run(build_settings({"job": "fleet"}, {})).params.dedup == "exact"
    assert plan_run(build_settings(load_yaml(str(path)), {})).params.dedup == "fast"
    assert plan_run(build_settings(load_yaml(str(path)), {"dedup": "exact"})).params.dedup == "exact"
    with pytest.raises(ConfigError, match="setting 'dedup'.*'exact' or 'fast'"):
        build_settings({"job": "fleet"}, {"dedup": "first"})


@pytest.mark.parametrize("given,seconds", [("90", 90.0), ("90s", 90.0), ("5min", 300.0), ("1.5", 1.5), (45, 45.0)])
def test_duration_takes_a_unit_or_bare_seconds(given, seconds):
    assert RunSettings(job="fleet", duration=given).duration == seconds


def test_a_duration_without_a_known_unit_is_one_line():
    with pytest.raises(ConfigError, match="invalid --duration 'soon': use a number with a unit"):
        RunSettings(job="fleet", duration="soon")
