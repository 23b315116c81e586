"""Task logs as ``hetsched up`` keeps them, read for ``GET /v1/jobs/{id}/logs``.

A task can write into its job directory, so what is there is not trusted: the path comes
from the job record, never from the request, and a file that is not what the service wrote
is refused.
"""

import os
import stat
from pathlib import Path

from fastapi import HTTPException

from hetsched.agent.logcap import was_cut
from hetsched.drivers.executor import ProcessExecutor

__all__ = ["MAX_LOG_CHUNK", "MAX_LOG_OFFSET", "LocalLogs"]

#: the most bytes one log request may ask for
MAX_LOG_CHUNK = 1 << 20
#: the largest log offset a request may name: 2^53 - 1, exact in every JSON client
MAX_LOG_OFFSET = (1 << 53) - 1


class LocalLogs:
    """Task logs as ``hetsched up`` keeps them: files under the executor's home (the Ray
    executor streams its tasks' output into the same files)."""

    def __init__(self, executor: ProcessExecutor | None) -> None:
        if executor is None:
            raise HTTPException(404, "no such log")
        self.executor = executor

    def read(
        self, job_id: str, task: int, stream: str, offset: int, limit: int
    ) -> tuple[bytes, int]:
        path = self.executor.log_path(job_id, task, stream)
        return _read_log(path, self.executor.home, offset, limit)


def _read_log(path: Path, root: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """Read from a log under ``root``. A task can write into its job directory, so what is
    there is not trusted: symlinks are not followed (404); a file with more than one link
    (a hard link to a file the task could read), another owner than the service, or that is
    not a regular file (a FIFO would block the read) is refused (403)."""
    real_root = os.path.realpath(root)
    if not os.path.realpath(path).startswith(real_root + os.sep):
        raise HTTPException(404, "no such log")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return b"", offset
    except OSError:
        raise HTTPException(404, "no such log") from None
    try:
        info = os.fstat(fd)
        problem = _log_file_problem(info)
        if problem is not None:
            raise HTTPException(403, f"log refused: {problem}")
        if offset > info.st_size and was_cut(fd):
            offset = 0  # cut under its cap (agent/logcap.py) since: from its new start
        if offset >= info.st_size:
            return b"", offset
        data = os.pread(fd, limit, offset)
    finally:
        os.close(fd)
    return data, offset + len(data)


def _log_file_problem(info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_nlink != 1:
        return f"the file has {info.st_nlink} links (a log has one)"
    if info.st_uid != os.geteuid():
        return f"the file's owner (uid {info.st_uid}) is not the service's"
    return None
