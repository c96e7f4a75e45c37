"""Where a session listens: loopback in local mode; on a cluster, one line says what opens."""

from speedlayer.runtime.session import exposure_note, network_conf


def test_local_mode_binds_the_driver_and_the_ui_to_loopback_with_kill_links_off():
    conf, env = network_conf("local[*]")
    assert conf == {"spark.ui.killEnabled": "false", "spark.driver.bindAddress": "127.0.0.1",
                    "spark.driver.host": "127.0.0.1"}
    assert env == {"SPARK_LOCAL_IP": "127.0.0.1"}
    assert exposure_note("local[2]") is None


def test_the_ui_can_be_turned_off_or_opened():
    assert network_conf("local[2]", "off")[0]["spark.ui.enabled"] == "false"
    conf, env = network_conf("local[2]", "open")
    assert env == {} and conf["spark.driver.bindAddress"] == "127.0.0.1" and conf["spark.ui.killEnabled"] == "false"
    assert "every interface" in exposure_note("local[2]", "open")


def test_a_cluster_master_keeps_the_driver_reachable_and_says_what_opens():
    conf, env = network_conf("spark://10.0.0.5:7077")
    assert "spark.driver.bindAddress" not in conf and env == {}
    note = exposure_note("spark://10.0.0.5:7077")
    assert "\n" not in note
    assert note.startswith("--master spark://10.0.0.5:7077: executors must reach this driver")
    assert "RPC and block-manager ports" in note and "Spark UI listens on every interface" in note
    assert "Spark UI is off" in exposure_note("spark://10.0.0.5:7077", "off")
