"""A task of a job with a driver group and a worker group, for the tests of job shapes on
the local and the Ray executor. ``worker OUT`` dumps its environment to OUT, then waits for
one message on its own address; ``driver OUT`` dumps its environment, then sends each worker
its peers list a message."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

PATH = Path(__file__).resolve()


def command(role: str, out: Path) -> list[str]:
    """The command of a task of ``role`` (worker or driver) writing into ``out``."""
    return [sys.executable, str(PATH), role, str(out)]


def _dump(out: Path, name: str) -> None:
    env = {k: v for k, v in os.environ.items() if k.startswith("HETSCHED_")}
    (out / f"{name}.env").write_text(json.dumps(env))


def worker(out: Path) -> None:
    name = f"{os.environ['HETSCHED_GROUP']}-{os.environ['HETSCHED_GROUP_INDEX']}"
    _dump(out, name)
    address = (os.environ["HETSCHED_HOST"], int(os.environ["HETSCHED_PORT"]))
    with socket.create_server(address) as server:
        server.settimeout(60)
        conn, _ = server.accept()
        with conn:
            (out / f"{name}.got").write_text(conn.recv(100).decode())


def driver(out: Path) -> None:
    _dump(out, "driver-0")
    for peer in json.loads(os.environ["HETSCHED_PEERS"])["workers"]:
        deadline = time.time() + 60
        while True:
            try:
                with socket.create_connection((peer["host"], peer["port"]), timeout=5) as s:
                    s.sendall(f"hello worker {peer['index']}".encode())
                break
            except OSError:
                assert time.time() < deadline
                time.sleep(0.1)


if __name__ == "__main__":
    {"worker": worker, "driver": driver}[sys.argv[1]](Path(sys.argv[2]))
