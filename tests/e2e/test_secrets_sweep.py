"""A secret planted everywhere a user can put one never reaches what a run writes or prints."""

from urllib.parse import quote

from tests.servers import POSTGRES

SECRET = "zq7Kx9Plant"  # each planted secret holds this, with a suffix of its own


def sweep(tmp_path, *results):
    """Every file under ``tmp_path`` (state dir, spark.log, manifest, outputs) and every stdout/stderr."""
    found = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    found += [f"output {i}" for i, r in enumerate(results) if SECRET in r.stdout + r.stderr]
    return found


def test_no_planted_secret_reaches_the_state_dir_the_log_or_the_terminal(run_cli, tmp_path, postgres_url):
    password = f"{SECRET}1/ss#wo?rd@x"
    database = postgres_url.rsplit("/", 1)[1]
    sink = f"postgresql://postgres:{quote(password, safe='')}@{POSTGRES.host}:{POSTGRES.port}/{database}?table=alerts"
    rides = f"kafka://127.0.0.1:9092/rides?kafka.sasl.jaas.config={SECRET}2&kafka.ssl.keystore.key={SECRET}3"
    run = run_cli("run", "fleet", "--source", "generator://?late=0&seed=7&rate=500&rows_per_batch=1000",
                  "--max-events", "1000", "--state-dir", "st", "--no-live",
                  "--sink", "windows=parquet:out/w", "--sink", f"alerts={sink}", "--rides", rides,
                  "--conf", f"spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net={SECRET}4",
                  "--conf", f"spark.kafka.ssl.keystore.key={SECRET}5")
    assert run.returncode == 0, run.stderr[-2000:]
    assert (tmp_path / "st" / "spark.log").is_file() and (tmp_path / "st" / "speedlayer-run.json").is_file()
    assert "alerts -> postgresql://postgres:***@" in run.stderr

    option = run_cli("run", "wordcount", "--source", "generator://", "--option", f"token={SECRET}6")
    raw = run_cli("run", "fleet", "--sink", f"alerts=postgresql://postgres:{password}@{POSTGRES.host}/{database}")
    assert sweep(tmp_path, run, option, raw) == []
    assert option.returncode == 2 and raw.returncode == 2
    assert "percent-encode" in raw.stderr
