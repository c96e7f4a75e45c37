"""The job file's pipeline on static DataFrames: the same results as the oracle, and its SQL refused in one line."""

import pytest

from speedlayer.core.errors import ConfigError
from speedlayer.runtime.settings import RunSettings
from tests.helpers import batch_output, land_files
from tests.pipelines.job_file.orders import FIELDS, INGEST, ORDERS_YAML, input_files, oracle


@pytest.fixture(scope="module")
def orders(tmp_path_factory):
    root = tmp_path_factory.mktemp("orders")
    files = input_files()
    land_files(root / "landing", files, INGEST)
    (root / "orders.yaml").write_text(ORDERS_YAML)
    return RunSettings(job_file=str(root / "orders.yaml"), source=f"files:{root / 'landing'}?format=json"), files


def test_the_same_job_on_a_static_read_gives_the_oracles_results(spark, orders):
    settings, files = orders
    expected = oracle(files)
    windows = {(r.window_start, r.window_end, r.currency): (round(r.revenue, 6), r.orders)
               for r in batch_output(spark, settings, "revenue").collect()}
    assert windows == expected["windows"]  # a static read has no watermark: every window
    big = {r.order_id: tuple(r[f] for f in FIELDS[1:]) for r in batch_output(spark, settings, "big-orders").collect()}
    assert big == expected["big-orders"]
    dead = sorted((r.payload, r.reason) for r in batch_output(spark, settings, "dead-letters").collect())
    assert dead == expected["dead-letters"]


def test_the_view_holds_the_fields_only_and_a_window_is_flattened(spark, orders, tmp_path):
    settings, _ = orders
    text = ORDERS_YAML.replace("SELECT order_id, customer_id, amount, currency, coupon, gift, order_time\n", "SELECT *\n")
    (tmp_path / "star.yaml").write_text(text)
    star = batch_output(spark, settings.model_copy(update={"job_file": str(tmp_path / "star.yaml")}), "big-orders")
    assert star.columns == list(FIELDS)  # no ingest_time, no offset
    assert batch_output(spark, settings, "revenue").columns[:3] == ["window_start", "window_end", "currency"]


@pytest.mark.parametrize("edit,message", [
    (("key: [order_id]", "key: [order_no]"), "output 'big-orders': key column 'order_no' is not a column of its SQL "
                                             "result (order_id, customer_id, amount, currency, coupon, gift, order_time): "
                                             "fix its key or its SQL in {file}"),
    (("FROM events WHERE amount > 1000", "FROM events WHERE amount >"), "output 'big-orders': [PARSE_SYNTAX_ERROR] "
                                                                        "Syntax error at or near end of input. SQLSTATE: "
                                                                        "42601 (line 3, pos 0): fix the SQL in {file}"),
    (("FROM events WHERE amount > 1000", "FROM events WHERE amount > 1000; DROP TABLE x"),
     "output 'big-orders': [PARSE_SYNTAX_ERROR] Syntax error at or near 'DROP': extra input 'DROP'. SQLSTATE: 42601 "
     "(line 2, pos 33): fix the SQL in {file}"),
    (("FROM events WHERE amount > 1000", "FROM orders WHERE amount > 1000"),
     "output 'big-orders': [TABLE_OR_VIEW_NOT_FOUND] The table or view `orders` cannot be found."),
])
def test_sql_mistakes_name_the_output_and_the_file(spark, orders, tmp_path, edit, message):
    settings, _ = orders
    assert edit[0] in ORDERS_YAML
    path = tmp_path / "bad.yaml"
    path.write_text(ORDERS_YAML.replace(*edit))
    with pytest.raises(ConfigError) as refused:
        batch_output(spark, settings.model_copy(update={"job_file": str(path)}), "big-orders")
    assert str(refused.value).startswith(message.format(file=path)) and "\n" not in str(refused.value)
