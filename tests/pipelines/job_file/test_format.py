"""The job file format: what a valid file becomes, and every mistake as one line naming the file and the key."""

import re

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.pipelines.job_file import load_job_file
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings, build_settings
from tests.pipelines.job_file.orders import ORDERS_YAML

MINIMAL = """\
name: clicks
schema:
  time_field: t
  fields: [{name: page, type: string}, {name: t, type: timestamp}]
outputs:
  pages:
    sql: SELECT page, t FROM events
"""


def write(tmp_path, text, name="job.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_orders_file_becomes_a_job(tmp_path):
    job = load_job_file(write(tmp_path, ORDERS_YAML))
    assert job.name == "orders" and job.summary.startswith("shop orders: revenue")
    assert list(job.outputs) == ["revenue", "big-orders", "per-customer", "dead-letters", "late"]  # late: a dedup key
    assert job.dedup_key == "order_id" and job.outputs["late"].key == ("order_id", "missed_watermark")
    assert job.default_outputs == ("revenue", "big-orders")
    assert job.defaults == {"watermark": "10s"} and job.default_source == ""
    revenue = job.outputs["revenue"]
    assert (revenue.modes, revenue.default_mode, revenue.key) == (("append", "update", "complete"), "append",
                                                                  ("window_start", "window_end", "currency"))
    assert revenue.stateful is None and revenue.defined_in == str(tmp_path / "job.yaml")  # its plan will tell
    assert job.outputs["per-customer"].default_mode == "update"  # the first of its modes
    fields = {f.name: (f.kind, f.required, f.min, f.max, f.choices) for f in job.schema.fields}
    assert fields["amount"] == ("double", True, 0, 100000, None)
    assert fields["currency"] == ("string", True, None, None, ("EUR", "USD", "GBP"))
    assert fields["gift"] == ("boolean", False, None, None, None)
    assert (job.schema.name, job.schema.time_field) == ("shop order", "order_time")
    assert job.definition.startswith("sha256:")


def test_a_minimal_file_takes_the_defaults(tmp_path):
    job = load_job_file(write(tmp_path, MINIMAL))
    assert job.default_outputs == ("pages",) and job.outputs["pages"].modes == ("append",)
    assert job.schema.name == "clicks" and job.outputs["pages"].summary == "SELECT page, t FROM events"


def test_the_definition_changes_with_what_is_computed_only(tmp_path):
    base = load_job_file(write(tmp_path, ORDERS_YAML)).definition
    same = ORDERS_YAML.replace("# a re-sent order counts once", "").replace("revenue and orders", "money") \
        .replace("defaults: {watermark: 10s}", "defaults: {watermark: 20s}").replace("default_outputs: [revenue, big-orders]", "")
    assert load_job_file(write(tmp_path, same, "same.yaml")).definition == base
    for edit in [("amount > 1000", "amount > 2000"), ("max: 100000", "max: 50000"), ("dedup_key: order_id", ""),
                 ("modes: [append]\n", "modes: [append, complete]\n"), ("key: [order_id]", "key: [order_id, customer_id]")]:
        assert edit[0] in ORDERS_YAML
        changed = load_job_file(write(tmp_path, ORDERS_YAML.replace(*edit), "changed.yaml")).definition
        assert changed != base, edit


@pytest.mark.parametrize("edit,message", [
    (("name: clicks", "name: my clicks"), "name: 'my clicks' is not a job name: use letters, digits, '-' and '_' (e.g. orders)"),
    (("name: clicks\n", ""), "name is missing: add it (the job's name, e.g. name: orders)"),
    (("  time_field: t\n", ""), "schema.time_field is missing: add it (the timestamp field that is event time)"),
    (("time_field: t", "time_field: page"), "schema: time_field 'page' must be a required timestamp field: "
                                            "give it type: timestamp and no required: false"),
    (("time_field: t", "time_field: when"), "schema: time_field 'when' is not one of the fields (page, t): "
                                            "name the timestamp field of event time"),
    (("type: string}", "type: text}"), "schema.fields.0.type: Input should be 'string', 'double', 'long', 'boolean' or "
                                       "'timestamp' (got 'text')"),
    (("type: string}", "type: string, min: 1}"), "schema.fields.0: field 'page': min and max apply to double and long "
                                                 "fields, not string: remove them or change the type"),
    (("{name: page, type: string}", "{name: n, type: long, min: 5, max: 1}"),
     "schema.fields.0: field 'n': min 5 is above max 1: swap them"),
    (("{name: page, type: string}", "{name: n, type: long, allowed: [a]}"),
     "schema.fields.0: field 'n': allowed values apply to string fields, not long: remove them or make the field a string"),
    (("type: string}", "type: string, allowed: [yes]}"),
     "schema.fields.0.allowed.0: Input should be a valid string (YAML reads yes, no, on, off and numbers as such): "
     "quote the value (got True)"),
    (("name: page", "name: offset"), "schema.fields.0.name: 'offset' is a column decode adds to every event: rename the field"),
    (("name: page", "name: page-id"), "schema.fields.0.name: 'page-id' is not a plain identifier: use letters, digits "
                                      "and underscores, starting with a letter (e.g. order_id)"),
    (("{name: page, type: string}", "{name: t, type: string}"),
     "schema: field 't' is given twice (names are case-insensitive in SQL): keep one"),
    (("type: string}", "type: string, optional: true}"),
     "unknown key 'schema.fields.0.optional': use one of name, type, required, min, max, allowed"),
    (("outputs:", "dedup_key: page_id\noutputs:"), "dedup_key: 'page_id' is not a field of its events (page, t): name the "
                                                   "field, or the fields together, that identify an event, e.g. dedup_key: "
                                                   "[device_id, reading_time]"),
    (("outputs:", "dedup_key: []\noutputs:"), "dedup_key: names no field: give the field, or the fields together, that "
                                              "identify an event, e.g. dedup_key: [device_id, reading_time], or no dedup_key"),
    (("outputs:", "dedup_key: [page, t, page]\noutputs:"), "dedup_key: names 'page' twice: list each field once"),
    (("outputs:", "dedup_key: [page, 12]\noutputs:"), "dedup_key.1: Input should be a valid string (YAML reads yes, no, "
                                                      "on, off and numbers as such): quote the value (got 12)"),
    (("outputs:", "dedup_key: t\noutputs:"), "dedup_key: 't' is the event time alone, which does not tell events apart "
                                             "(two events of one instant would count as copies of one, in the late output "
                                             "too): key on the time together with the field that tells their sources "
                                             "apart, e.g. dedup_key: [device_id, t]"),
    (("{name: t, type: timestamp}]", "{name: t, type: timestamp}, {name: note, type: string, required: false}]\n"
                                     "dedup_key: [note, t]"),
     "dedup_key: 'note' is an optional field: events without it would all count as copies of one event; make the field "
     "required or key on other fields"),
    (("outputs:", "defaults: {watermark: 10}\noutputs:"), "defaults.watermark: 10 has no unit: write e.g. 10s or 10ms"),
    (("outputs:", "defaults: {watermark: soon}\noutputs:"), "defaults.watermark: 'soon' is not a duration: use a number "
                                                           "with a unit, e.g. 500ms, 10s, 1min"),
    (("outputs:", "defaults: {slide: 1min}\noutputs:"),
     "unknown key 'defaults.slide': use one of watermark, max_ahead, dedup, window"),
    (("outputs:", "default_outputs: [page]\noutputs:"),
     "default_outputs names 'page', which is not an output: choose among pages"),
    (("sql: SELECT page, t FROM events", "sql: SELECT 1\n    modes: [append, append]"),
     "outputs.pages: modes ['append', 'append'] repeats a mode: list each once"),
    (("sql: SELECT page, t FROM events", "sql: SELECT 1\n    modes: [upsert]"),
     "outputs.pages.modes.0: Input should be 'append', 'update' or 'complete' (got 'upsert')"),
    (("sql: SELECT page, t FROM events", "sql: SELECT 1\n    default_mode: update"),
     "outputs.pages: default_mode update is not one of its modes (append): add it to modes or choose one of them"),
    (("sql: SELECT page, t FROM events", "sql: SELECT 1\n    key: [page id]"),
     "outputs.pages: key column 'page id' is not a plain identifier: alias the column in the SQL (AS name) and name that"),
    (("sql: SELECT page, t FROM events", "sql: SELECT 1\n    query: SELECT 1"),
     "unknown key 'outputs.pages.query': use one of summary, sql, modes, default_mode, key"),
    (("sql: SELECT page, t FROM events", "modes: [append]"),
     "outputs.pages.sql is missing: add it (a Spark SQL query over the view events)"),
    (("  pages:", "  dead-letters:"), "outputs: 'dead-letters' is an output every job file job gets: give yours another name"),
    (("  pages:", "  late:"), "outputs: 'late' is an output every job file job gets: give yours another name"),
    (("name: clicks", "name: clicks\nwatermark: 5s"), "unknown key 'watermark': use one of name, summary, schema, dedup_key, "
                                                     "defaults, default_source, default_outputs, outputs, references, variables"),
    (("name: clicks", "name: clicks\nsummary: clicks: per page"), "is not valid YAML at line 2 (mapping values are not "
                                                                 "allowed here): fix its syntax (a value holding ': ' or "
                                                                 "starting with a quote must be quoted whole)"),
])
def test_each_mistake_is_one_line_naming_the_file_the_key_and_the_fix(tmp_path, edit, message):
    assert edit[0] in MINIMAL
    path = write(tmp_path, MINIMAL.replace(*edit))
    with pytest.raises(ConfigError) as refused:
        load_job_file(path)
    text = re.sub(r"^(job file \S+), line \d+:", r"\1:", str(refused.value))  # lines: the test below
    assert "\n" not in text
    assert text == f"job file {path}: {message}" or text == f"job file {path} {message}"


def test_every_mistake_is_told_at_once_each_with_its_line(tmp_path):
    path = write(tmp_path, MINIMAL.replace("name: clicks", "name: clicks\nwatermark: 5s")
                 .replace("{name: t, type: timestamp}", "{name: t, type: time}").replace("sql: SELECT page, t FROM events",
                                                                                        "query: SELECT 1"))
    with pytest.raises(ConfigError) as refused:
        load_job_file(path)
    text = str(refused.value)
    assert "\n" not in text and text.startswith(f"job file {path} has 4 mistakes: ")
    told = text.removeprefix(f"job file {path} has 4 mistakes: ").split("; ")
    assert [t.split(": ")[0] for t in told] == ["line 2", "line 5", "line 8", "line 8"]  # in the file's order
    assert told[0].startswith("line 2: unknown key 'watermark'") and told[1].startswith("line 5: schema.fields.1.type")
    assert told[2].startswith("line 8: unknown key 'outputs.pages.query'")  # the misspelt key before what it misses
    assert told[3].startswith("line 8: outputs.pages.sql is missing")


def test_one_mistake_names_its_line(tmp_path):
    path = write(tmp_path, MINIMAL.replace("sql: SELECT page, t FROM events", "sql: SELECT 1\n    modes: [upsert]"))
    with pytest.raises(ConfigError, match=re.escape(f"job file {path}, line 8: outputs.pages.modes.0: Input should be")):
        load_job_file(path)


@pytest.mark.parametrize("text,message", [
    ("- just a list", "must be a mapping with name:, schema: and outputs: (see docs/job-files.md)"),
    ("", "must be a mapping with name:, schema: and outputs: (see docs/job-files.md)"),
])
def test_a_file_that_is_not_a_mapping_is_refused(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=f"^{re.escape(f'job file {path} {message}')}$"):
        load_job_file(path)


def test_the_config_file_names_a_job_file_and_a_job_on_the_command_line_replaces_it(tmp_path):
    settings = build_settings({"job_file": "orders.yaml", "watermark": "20s"}, {})
    assert (settings.job, settings.job_file) == (None, "orders.yaml")
    assert build_settings({"job_file": "orders.yaml"}, {"job": "fleet"}).job_file is None
    assert build_settings({"job": "fleet"}, {"job_file": "orders.yaml"}).job is None
    with pytest.raises(ConfigError, match="^give a JOB or --job-file, not both"):
        build_settings({"job": "fleet", "job_file": "orders.yaml"}, {})


def test_a_run_of_a_job_file_without_a_source_says_to_give_one(tmp_path):
    path = write(tmp_path, MINIMAL)
    with pytest.raises(ConfigError, match=r"^job 'clicks' names no default source: give --source URI \(e.g. files:"):
        plan_run(RunSettings(job_file=str(path)))
    (tmp_path / "landing").mkdir()
    plan = plan_run(RunSettings(job_file=str(path), source=f"files:{tmp_path / 'landing'}"))
    assert [q.output.name for q in plan.queries] == ["pages"] and plan.job.name == "clicks"
    with pytest.raises(ConfigError, match="^job 'clicks' has no output 'windows': its outputs are pages, dead-letters$"):
        plan_run(RunSettings(job_file=str(path), source=f"files:{tmp_path / 'landing'}", sinks={"windows": "console:"}))


def test_the_job_files_defaults_yield_to_flags(tmp_path):
    path = write(tmp_path, ORDERS_YAML.replace("defaults: {watermark: 10s}", "defaults: {watermark: 10s, dedup: fast}"))
    (tmp_path / "landing").mkdir()
    source = f"files:{tmp_path / 'landing'}"
    assert plan_run(RunSettings(job_file=str(path), source=source)).params.watermark_ms == 10_000
    plan = plan_run(RunSettings(job_file=str(path), source=source, watermark="30s"))
    assert (plan.params.watermark_ms, plan.params.dedup) == (30_000, "fast")


def test_a_composite_key_is_a_list_of_fields_the_event_time_among_them(tmp_path):
    job = load_job_file(write(tmp_path, MINIMAL.replace("outputs:", "dedup_key: [page, t]\noutputs:")))
    assert job.dedup_key == ("page", "t") and job.outputs["late"].key == ("page", "t", "missed_watermark")
    assert list(job.outputs) == ["pages", "dead-letters", "late"]


def test_one_name_or_a_list_of_it_is_the_same_job_and_earlier_runs_resume(tmp_path):
    """The digests are those a state directory of an earlier version recorded (``dedup_key`` was one name only)."""
    def digest(text):
        return load_job_file(write(tmp_path, text)).definition

    as_list = ORDERS_YAML.replace("dedup_key: order_id", "dedup_key: [order_id]")
    assert digest(ORDERS_YAML) == digest(as_list) == "sha256:c31c96704ecf02a0"
    assert digest(MINIMAL) == "sha256:3607acff80289ac5"
    composite = MINIMAL.replace("outputs:", "dedup_key: [page, t]\noutputs:")
    assert digest(composite) != digest(composite.replace("[page, t]", "[t, page]"))  # the order the state is keyed in


def test_key_mistakes_are_told_with_the_others_each_with_its_line(tmp_path):
    text = MINIMAL.replace("name: clicks", "name: clicks\nwatermark: 5s").replace(
        "outputs:", "dedup_key:\n  - page\n  - when\n  - page\noutputs:")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as refused:
        load_job_file(path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"job file {path} has 2 mistakes: line 2: unknown key 'watermark'")
    assert message.endswith("; line 6: dedup_key: 'when' is not a field of its events (page, t): name the field, or the "
                            "fields together, that identify an event, e.g. dedup_key: [device_id, reading_time]; "
                            "names 'page' twice: list each field once")
