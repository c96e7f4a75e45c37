"""``speedlayer train JOB`` fits the model any job declares (``Job.trainer``): fraud's, or a user's
job's, whose settings are flags of their own; a job without one is refused in one line."""

import pytest

from tests.cli.test_errors import help_of, run

#: a user's job with a model of its own: its trainer counts words in Spark and saves the count
NOTES = '''
from pathlib import Path

from pydantic import BaseModel, Field

from speedlayer import APPEND, DEAD_LETTERS, EventSchema, Field as EventField, Job, Output, Trainer

NOTE = EventSchema("note", (EventField("text", "string"), EventField("time", "timestamp")), time_field="time")


class NotesTraining(BaseModel):
    model: str = Field("models/notes", description="where to save the model")
    words: int = Field(10, gt=0, description="words to learn")


def fit(spark, options):
    learned = spark.range(options.words).count()
    Path(options.model).mkdir(parents=True, exist_ok=True)
    (Path(options.model) / "words").write_text(str(learned))
    return [f"learned {learned} words; saved to {options.model}"]


NOTES = Job(name="notes", summary="notes", schema=NOTE, pipeline=lambda notes, params: {"notes": notes},
            outputs={"notes": Output("notes", "every note", (APPEND,), APPEND, False), "dead-letters": DEAD_LETTERS},
            trainer=Trainer(NotesTraining, fit, "words, counted"))
'''


def test_a_users_job_trains_its_own_model_with_its_own_flags(tmp_path, run_cli):
    (tmp_path / "notes_job.py").write_text(NOTES)
    result = run_cli("train", "notes_job:NOTES", "--words", "7", "--model", "out/notes", "--master", "local[1]")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "learned 7 words; saved to out/notes" in result.stdout
    assert (tmp_path / "out" / "notes" / "words").read_text() == "7"


def test_a_job_without_a_model_is_refused_naming_the_jobs_with_one(capsys):
    code, _, err = run(capsys, "train", "wordcount")
    assert code == 2 and err.strip() == ("error: job 'wordcount' has no model to train: train one of fraud "
                                         "(a job declares its model with Job(trainer=Trainer(...)))")


@pytest.mark.parametrize("argv,match", [
    (["--evnts", "5000"], "no such option --evnts for the training of job 'fraud': did you mean --events?"),
    (["--generator", "generator://?kind=actions"], "option 'generator': it must generate transactions: add kind=transactions"),
    (["--option", "events=10"], "option 'events': Input should be greater than or equal to 1000"),
])
def test_training_settings_are_checked_before_spark_starts_in_one_line(capsys, argv, match):
    code, _, err = run(capsys, "train", "fraud", *argv)
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1


def test_jobs_describes_a_jobs_model_and_its_settings(capsys):
    out = help_of(capsys, "jobs", "fraud")
    assert "  model: a logistic regression and card profiles, fitted on generated history (speedlayer train fraud;" in out
    assert "    holdout " in out


def test_train_help_lists_the_named_jobs_training_settings(capsys):
    out = help_of(capsys, "train", "fraud", "--help")
    own = out[out.index("Training of job fraud"):]
    for flag in ("--model VALUE", "--events VALUE", "--holdout VALUE", "--generator VALUE", "--threshold VALUE"):
        assert flag in own
