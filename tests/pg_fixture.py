"""A PostgreSQL server for the store's tests: ``HETSCHED_TEST_POSTGRES_URL`` when CI starts
one, else a throwaway cluster of the machine's PostgreSQL (skipped where there is none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hetsched.controlplane import Store, free_port

__all__ = ["new_database", "postgres_url"]


def _pg_bin() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def new_database(postgres_url: str, prefix: str = "t") -> str:
    """The URL of a new, empty database on the server of ``postgres_url``."""
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    admin = Store(postgres_url)
    try:
        with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
    finally:
        admin.close()
    return postgres_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """HETSCHED_TEST_POSTGRES_URL if set (CI starts a server), else a throwaway cluster."""
    url = os.environ.get("HETSCHED_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server: set HETSCHED_TEST_POSTGRES_URL or install postgresql")
    # not under pytest's 0700 temp root: the server runs as another user when we are root
    data = Path(tempfile.mkdtemp(prefix="hetsched-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("PostgreSQL refuses to run as root and runuser is missing")
        shutil.chown(data, "postgres")
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    try:
        subprocess.run(
            [
                *prefix,
                str(bindir / "initdb"),
                "-D",
                str(data / "db"),
                "-U",
                "postgres",
                "-A",
                "trust",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        subprocess.run(
            [
                *prefix,
                str(bindir / "pg_ctl"),
                "-D",
                str(data / "db"),
                "-o",
                f"-p {port} -k {data} -c listen_addresses=127.0.0.1",
                "-l",
                str(data / "log"),
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"could not start a PostgreSQL server: {exc.stderr.decode()[-300:]}")
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"could not start a PostgreSQL server: {exc}")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data / "db"), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(data, ignore_errors=True)
