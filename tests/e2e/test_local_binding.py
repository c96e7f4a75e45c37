"""In local mode the JVM Spark starts listens on loopback only: driver RPC, block manager, UI, gateway."""

import subprocess
import sys
from pathlib import Path

LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def listening(pid: int) -> list[str]:
    """``address:port`` of every TCP socket the process listens on, from /proc (no ss/netstat needed)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                address, port = fields[1].split(":")
                found.append(f"{_address(address, width)}:{int(port, 16)}")
    return sorted(found)


def _address(hexed: str, width: int) -> str:
    raw = bytes.fromhex(hexed)
    if width == 8:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
    flat = b"".join(words)
    if flat[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in flat[12:])  # IPv4-mapped
    return "[" + ":".join(flat[i:i + 2].hex() for i in range(0, 16, 2)) + "]"


SESSION = """
import sys
from speedlayer.runtime.session import build_session
spark = build_session("local[1]", {}, app_name="binding-test", log_file=sys.argv[1])
jvm = spark.sparkContext._jvm
print(jvm.java.lang.ProcessHandle.current().pid(), spark.sparkContext.uiWebUrl, flush=True)
sys.stdin.readline()
"""


def test_a_local_session_listens_on_loopback_only(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", SESSION, str(tmp_path / "spark.log")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pid, ui = child.stdout.readline().split()
        ports = listening(int(pid))
    finally:
        child.stdin.close()
        child.wait(timeout=120)
    assert len(ports) >= 3, ports  # driver RPC, block manager, UI (and Py4J's gateway)
    assert [p for p in ports if not p.startswith("127.0.0.1:")] == []
    assert ui.startswith("http://127.0.0.1:") and ui.split(":")[-1] in {p.split(":")[1] for p in ports}
