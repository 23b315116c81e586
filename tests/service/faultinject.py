"""Store faults made for real, for the store-fault soak (``storefaults.py``): a small tmpfs
that a ballast file fills, an ext4 filesystem on a loop device that the kernel turns
read-only (``trigger_fs_error`` with ``errors=remount-ro``), and a PostgreSQL server of
its own that is stopped (``pg_ctl stop -m immediate``) and started again on the same port,
or whose synchronous standby is promoted and takes over the primary's address.

Each needs root (mounts) or the machine's PostgreSQL; :func:`skip_reason` says what is
missing, and every context manager undoes what it did (unmount, detach, stop) even when
the test fails.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hetsched.controlplane import free_port

__all__ = ["Ballast", "Ext4Home", "PgFailover", "PgServer", "pg_bin", "skip_reason", "tmpfs"]


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def skip_reason(kind: str) -> str | None:
    """Why the fault ``kind`` (``disk_full``, ``read_only``, ``postgres``) cannot be made
    here, or None."""
    if kind == "postgres":
        if pg_bin() is None:
            return "no PostgreSQL binaries (initdb, pg_ctl)"
        if os.geteuid() == 0 and shutil.which("runuser") is None:
            return "PostgreSQL refuses root and runuser is missing"
        return None
    if os.geteuid() != 0:
        return f"{kind}: mounting a filesystem needs root"
    if shutil.which("mount") is None:
        return f"{kind}: no mount command"
    if kind == "read_only":
        missing = [t for t in ("mkfs.ext4", "losetup", "e2fsck") if shutil.which(t) is None]
        if missing or not Path("/dev/loop-control").exists():
            return f"read_only: no loop devices or {', '.join(missing) or 'ext4 tools'}"
    return None


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (unmounted on exit)."""
    path.mkdir(parents=True, exist_ok=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


class Ballast:
    """A file that fills the filesystem it is on to the last byte (:meth:`fill`) and frees it
    again (:meth:`free`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fill(self) -> int:
        """Write until the disk is full; returns the bytes written."""
        written = 0
        block = b"\0" * (1 << 16)
        with open(self.path, "wb", buffering=0) as out:
            while True:
                try:
                    written += out.write(block)
                except OSError:
                    break
            # the last bytes a block's write left
            for size in (4096, 512, 1):
                with contextlib.suppress(OSError):
                    while True:
                        written += out.write(b"\0" * size)
        return written

    def free(self) -> None:
        self.path.unlink(missing_ok=True)


class Ext4Home:
    """An ext4 filesystem in a file on a loop device, mounted with ``errors=remount-ro`` at
    ``path``: :meth:`fail` makes the kernel turn it read-only as after an I/O error
    (writes fail with EROFS; it cannot be made writable again while mounted);
    :meth:`repair` unmounts it, checks it with e2fsck and mounts it again (what an operator
    does; processes holding files on it must have let go)."""

    def __init__(self, path: Path, size_mb: int = 256) -> None:
        self.path = path
        self.size_mb = size_mb
        self.image = Path(tempfile.mkdtemp(prefix="hetsched-ext4-")) / "home.img"
        self.device = ""

    def __enter__(self) -> Ext4Home:
        with open(self.image, "wb") as out:
            out.truncate(self.size_mb << 20)
        _run("mkfs.ext4", "-q", "-F", str(self.image))
        self.device = subprocess.run(
            ["losetup", "-f", "--show", str(self.image)], check=True, capture_output=True, text=True
        ).stdout.strip()
        self.mount()
        return self

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-o", "errors=remount-ro", self.device, str(self.path))
        os.chmod(self.path, 0o700)

    def fail(self) -> None:
        name = Path(self.device).name
        Path(f"/sys/fs/ext4/{name}/trigger_fs_error").write_text("store fault test\n")

    def repair(self) -> None:
        _run("umount", str(self.path))
        subprocess.run(["e2fsck", "-y", "-f", self.device], capture_output=True)
        self.mount()

    def __exit__(self, *_exc: object) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)
        if self.device:
            subprocess.run(["losetup", "-d", self.device], capture_output=True)
        shutil.rmtree(self.image.parent, ignore_errors=True)


def pg_bin() -> Path | None:
    for candidate in [
        *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True),
        Path("/usr/local/bin"),
    ]:
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


class PgServer:
    """A PostgreSQL server of its own on a loopback port (a throwaway cluster), which the
    test stops at once (``-m immediate``: as a crash) and starts again on the same port."""

    def __init__(self) -> None:
        bindir = pg_bin()
        assert bindir is not None
        self.bindir = bindir
        self.data = Path(tempfile.mkdtemp(prefix="hetsched-pgfault-"))
        self.port = free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _ctl(self, *args: str) -> None:
        _run(*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.data / "db"), *args)

    def __enter__(self) -> PgServer:
        initdb = [str(self.bindir / "initdb"), "-D", str(self.data / "db"), "-U", "postgres"]
        _run(*self.prefix, *initdb, "-A", "trust")
        self.start()
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        self._ctl("-l", str(self.data / "log"), "-w", "-o", options, "start")

    def stop(self) -> None:
        self._ctl("-m", "immediate", "stop")

    def __exit__(self, *_exc: object) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.data, ignore_errors=True)


class PgFailover(PgServer):
    """A primary with a synchronous standby (a copy of the primary's fresh cluster that
    streams from it; every commit waits for the standby). :meth:`fail` stops the primary
    as a crash; :meth:`take_over` promotes the standby and moves it to the primary's
    address: a new server behind the same name, holding every acknowledged commit."""

    def __init__(self) -> None:
        super().__init__()
        self.standby = self.data / "standby"
        self.standby_port = free_port()

    def __enter__(self) -> PgFailover:
        initdb = [str(self.bindir / "initdb"), "-D", str(self.data / "db"), "-U", "postgres"]
        _run(*self.prefix, *initdb, "-A", "trust")
        _run("cp", "-a", str(self.data / "db"), str(self.standby))
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres"
        with open(self.standby / "postgresql.auto.conf", "a") as conf:
            conf.write(f"port = {self.standby_port}\nprimary_conninfo = '{conninfo}'\n")
        (self.standby / "standby.signal").touch()
        with open(self.data / "db" / "postgresql.auto.conf", "a") as conf:
            conf.write("synchronous_standby_names = '*'\n")
        if self.prefix:
            _run("chown", "-R", "postgres", str(self.standby))
        self.start()
        self._start_standby()
        return self

    def _options(self) -> str:
        return f"-k {self.data} -c listen_addresses=127.0.0.1"

    def _standby_ctl(self, *args: str) -> None:
        _run(*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.standby), *args)

    def _start_standby(self) -> None:
        log = str(self.data / "standby.log")
        self._standby_ctl("-l", log, "-w", "-o", self._options(), "start")

    def fail(self) -> None:
        self.stop()

    def take_over(self) -> None:
        self._standby_ctl("-w", "promote")
        self._standby_ctl("-m", "fast", "stop")
        conf = self.standby / "postgresql.auto.conf"
        text = conf.read_text().replace(f"port = {self.standby_port}", f"port = {self.port}")
        conf.write_text(text)
        self._start_standby()

    def __exit__(self, *_exc: object) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._standby_ctl("-m", "immediate", "stop")
        super().__exit__()
