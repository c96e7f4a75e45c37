"""A job file's reference tables and variables: what they become, and every mistake as one line, with its
line in the file, told together with the file's other mistakes."""

import re

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.core.tables import TableRef
from speedlayer.pipelines.job_file import load_job_file
from speedlayer.runtime.plan import plan_run
from speedlayer.runtime.settings import RunSettings

JOB = """\
name: vip
schema:
  time_field: t
  fields: [{name: customer_id, type: string}, {name: currency, type: string}, {name: t, type: timestamp}]
variables:
  rates_dir:
    summary: where today's rates are
references:
  customers:
    path: ref/customers.csv
    options: {delimiter: ";"}
  rates: {path: "${rates_dir}/rates.json"}
outputs:
  vip:
    sql: |
      SELECT e.customer_id, c.tier, r.to_eur FROM events e
      JOIN customers c ON e.customer_id = c.customer_id JOIN rates r USING (currency)
"""


@pytest.fixture
def job_dir(tmp_path):
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "customers.csv").write_text("customer_id;tier\nc1;gold\n")
    (tmp_path / "landing").mkdir()
    return tmp_path


def write(folder, text, name="vip.yaml"):
    path = folder / name
    path.write_text(text)
    return path


def refused(path) -> str:
    with pytest.raises(ConfigError) as error:
        load_job_file(path)
    assert "\n" not in str(error.value)
    return str(error.value)


def test_tables_and_variables_become_the_jobs_checks_and_options(job_dir):
    job = load_job_file(write(job_dir, JOB))
    assert list(job.options.model_fields) == ["rates_dir"]
    assert job.options.model_fields["rates_dir"].description == "where today's rates are"
    assert job.check is not None and job.shared_paths is not None
    # the variable is a flag of the run, like any job's option; the tables' directories a cluster must share
    (job_dir / "today").mkdir()
    (job_dir / "today" / "rates.json").write_text('{"currency": "EUR", "to_eur": 1.0}\n')
    plan = plan_run(RunSettings(job_file=str(job_dir / "vip.yaml"), source=f"files:{job_dir / 'landing'}",
                                options={"rates_dir": str(job_dir / "today")}))
    assert plan.params.options.rates_dir == str(job_dir / "today")
    assert job.shared_paths(plan.params) == {"reference table customers": job_dir / "ref",
                                             "reference table rates": job_dir / "today"}
    # speedlayer sql shows them as views, read as the job reads them
    assert plan.tables() == {
        "customers": TableRef("csv", str(job_dir / "ref" / "customers.csv"),
                              {"header": "true", "inferSchema": "true", "delimiter": ";"}),
        "rates": TableRef("json", str(job_dir / "today" / "rates.json"))}


def test_the_definition_holds_the_tables_as_written(job_dir):
    base = load_job_file(write(job_dir, JOB)).definition
    assert load_job_file(write(job_dir, JOB.replace('";"}', '";"}\n    summary: who is who'))).definition == base
    assert load_job_file(write(job_dir, JOB.replace('{delimiter: ";"}', '{delimiter: ";", header: false}'))).definition \
        != base
    without = load_job_file(write(job_dir, JOB.split("variables:")[0] + "outputs:" + JOB.split("outputs:")[1]
                                  .replace("JOIN customers c ON e.customer_id = c.customer_id JOIN rates r USING "
                                           "(currency)", "")))
    minimal = "name: vip\nschema:" + JOB.split("schema:")[1].split("variables:")[0] + \
              "outputs:\n  vip:\n    sql: |\n      SELECT e.customer_id, c.tier, r.to_eur FROM events e\n      \n"
    assert without.definition == load_job_file(write(job_dir, minimal, "minimal.yaml")).definition  # no tables: as before


@pytest.mark.parametrize("edit,line,message", [
    (("path: ref/customers.csv", "path: ref/customer.csv"), 10,
     "references.customers.path: {dir}/ref/customer.csv does not exist: fix the path (a relative path is taken from "
     "the job file's directory, {dir})"),
    (('{path: "${rates_dir}/rates.json"}', '{path: "${rates_dir}/rates.json", format: xml}'), 12,
     "references.rates.format: Input should be 'csv', 'json', 'parquet', 'orc' or 'text' (got 'xml')"),
    (('{path: "${rates_dir}/rates.json"}', '{path: "${rates_dir}/rates"}'), 12,
     "references.rates.path: '${rates_dir}/rates' does not end with a format's name: add format: csv, json, parquet, "
     "orc or text"),
    (("  rates: {", "  events: {"), 12, "references.events: 'events' is the view of the stream's events: give the "
                                        "table another name"),
    (("  rates: {", "  Customers: {"), 12, "references.Customers: 'Customers' and 'customers' are one name to SQL "
                                           "(names are case-insensitive): rename one"),
    (("JOIN rates r USING (currency)", ""), 12, "references.rates: no output's SQL reads the table 'rates': join it in "
                                                "an output (... JOIN rates ON ...), or remove it"),
    (("${rates_dir}/rates.json", "${rates_dir}/${day}/rates.json"), 12,
     "references.rates.path: ${day} is not a declared variable: add it under variables: (e.g. day: "
     "{default: ...}), or fix the name"),
    (("options: {", "opts: {"), 11, "unknown key 'references.customers.opts': use one of path, format, options, schema, "
                                    "refresh, summary"),
])
def test_each_table_mistake_is_one_line_with_its_line(job_dir, edit, line, message):
    assert edit[0] in JOB
    path = write(job_dir, JOB.replace(*edit))
    text = refused(path)
    found = re.findall(r"line (\d+): ", text)
    assert text == f"job file {path}, line {line}: " + message.replace("{dir}", str(job_dir)), text
    assert found == [str(line)]


def test_table_mistakes_are_told_with_the_files_other_mistakes(job_dir):
    path = write(job_dir, JOB.replace("type: timestamp}", "type: time}").replace("${rates_dir}", "${rate_dir}")
                 .replace("path: ref/customers.csv", "path: ref/nope.csv"))
    text = refused(path)
    told = text.removeprefix(f"job file {path} has 4 mistakes: ").split("; ")
    assert [t.split(": ")[0] for t in told] == ["line 4", "line 6", "line 10", "line 12"], text
    assert told[0].startswith("line 4: schema.fields.2.type: Input should be")
    assert told[1] == "line 6: variables.rates_dir: no reference path uses the variable 'rates_dir': use it as " \
                      "${rates_dir} in a path, or remove it"
    assert told[2].startswith("line 10: references.customers.path: ") and "ref/nope.csv does not exist" in told[2]
    assert told[3].startswith("line 12: references.rates.path: ${rate_dir} is not a declared variable")


def test_a_variable_without_a_value_and_a_table_it_leads_nowhere_are_refused_before_start(job_dir):
    path = write(job_dir, JOB)
    settings = RunSettings(job_file=str(path), source=f"files:{job_dir / 'landing'}")
    with pytest.raises(ConfigError) as error:
        plan_run(settings)
    assert str(error.value) == (f"job file {path}, line 6: variables.rates_dir: the variable 'rates_dir' has no value: "
                                "give it to the run (--rates-dir VALUE, or rates_dir: in --config), or a default in "
                                "the file")
    with pytest.raises(ConfigError) as error:
        plan_run(settings.model_copy(update={"options": {"rates_dir": "/nowhere"}}))
    assert str(error.value) == (f"job file {path}, line 12: references.rates.path: ${{rates_dir}}/rates.json is "
                                "/nowhere/rates.json, which does not exist: give the variable another value, or put "
                                "the table there")


def test_a_variables_default_is_taken_from_the_job_files_directory_and_a_given_value_from_here(job_dir, monkeypatch):
    (job_dir / "ref" / "rates.json").write_text("{}\n")
    path = write(job_dir, JOB.replace("summary: where today's rates are", "default: ref"))
    here = job_dir / "elsewhere"
    (here / "ref").mkdir(parents=True)
    (here / "ref" / "rates.json").write_text("{}\n")
    monkeypatch.chdir(here)
    job = load_job_file(path)
    plan = plan_run(RunSettings(job_file=str(path), source=f"files:{job_dir / 'landing'}"))
    assert job.shared_paths(plan.params)["reference table rates"] == job_dir / "ref"
    plan = plan_run(RunSettings(job_file=str(path), source=f"files:{job_dir / 'landing'}", options={"rates_dir": "ref"}))
    assert job.shared_paths(plan.params)["reference table rates"] == here / "ref"
