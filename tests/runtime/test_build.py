"""A per-batch step cut by the query's stop is told to Spark as a stop; any other error stays the step's."""

import pytest
from py4j.protocol import Py4JJavaError

from speedlayer.core.spark_errors import INTERRUPTED
from speedlayer.runtime.build import writing_per_batch


class _JavaError(Py4JJavaError):
    """A Py4JJavaError as a Spark job cut by a stop raises it, its Java text given (no JVM behind it)."""

    def __init__(self, text: str):
        Exception.__init__(self, text)
        self.text = text

    def __str__(self) -> str:
        return self.text


CUT_IN_A_BROADCAST = ("An error occurred while calling o412.count.\n: org.apache.spark.SparkException: Exception thrown "
                      "in awaitResult: \n\tat org.apache.spark.util.SparkThreadUtils$.awaitResult\n"
                      "Caused by: java.lang.InterruptedException\n\tat java.base/java.util.concurrent.locks")


def _step_raising(error):
    def step(rows, batch_id):
        raise error
    return step


def test_a_step_cut_by_the_stop_raises_what_spark_takes_for_a_stop():
    written = []
    with pytest.raises(RuntimeError) as raised:
        writing_per_batch(lambda rows, batch_id: written.append(rows), _step_raising(_JavaError(CUT_IN_A_BROADCAST)))([], 3)
    assert str(raised.value) == INTERRUPTED and written == []


@pytest.mark.parametrize("error", [ValueError("the model did not converge"),
                                   _JavaError("An error occurred while calling o9.count.\n: java.io.IOException: disk")])
def test_any_other_error_of_a_step_is_its_own(error):
    with pytest.raises(type(error)) as raised:
        writing_per_batch(lambda rows, batch_id: None, _step_raising(error))([], 3)
    assert raised.value is error
