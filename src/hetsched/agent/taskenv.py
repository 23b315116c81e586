"""What a task sees and leaves, whichever process executor runs it (local processes, Ray
actors): its key, its environment (identity and devices), and its files under the
executor's home (``<home>/jobs/<id>/task-<n>.out|.err``, which the API serves).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from hetsched.keys import TaskKey
from hetsched.model.device import Device

__all__ = [
    "device_env",
    "exit_reason",
    "identity_env",
    "job_folder",
    "local_indices",
    "open_task_log",
    "task_key",
    "task_log",
]


def task_key(job_id: str, task: int, run: int) -> str:
    """The executor's key of a task: the string form of its TaskKey (what its process
    carries in ``HETSCHED_TASK_KEY``)."""
    return str(TaskKey(job_id, task, run))


def job_folder(home: Path, job_id: str) -> Path:
    """A job's folder under an executor's home: its tasks' logs and exit files."""
    return home / "jobs" / job_id


def task_log(home: Path, job_id: str, task: int, stream: str) -> Path:
    """A task's log of ``stream`` (stdout or stderr), which every run of the task appends
    to: the layout both executors write (the Ray executor streams its tasks' output here)
    and the service reads."""
    return job_folder(home, job_id) / f"task-{task}.{'err' if stream == 'stderr' else 'out'}"


def identity_env(job_id: str, task: int, run: int, node: str, instance: str) -> dict[str, str]:
    """What a task learns of itself from its environment, whichever executor starts it
    (``HETSCHED_TASK_KEY`` is what its reports to the service name it by)."""
    return {
        "HETSCHED_JOB_ID": job_id,
        "HETSCHED_TASK_INDEX": str(task),
        "HETSCHED_RUN": str(run),
        "HETSCHED_NODE": node,
        "HETSCHED_TASK_KEY": task_key(job_id, task, run),
        "HETSCHED_INSTANCE": instance,
    }


def local_indices(devices: Sequence[Device]) -> dict[str, int]:
    """Each device's index among the node's devices of its class and vendor: what
    ``CUDA_VISIBLE_DEVICES`` (NVIDIA) or ``ROCR_VISIBLE_DEVICES`` (AMD) count."""
    seen: dict[tuple[str, str], int] = {}
    out: dict[str, int] = {}
    for device in devices:
        group = (device.device_class, device.vendor.lower())
        out[device.id] = seen.get(group, 0)
        seen[group] = out[device.id] + 1
    return out


def device_env(devices: Sequence[tuple[Device, int, int]]) -> dict[str, str]:
    """How frameworks expect to see their devices: vendor variables with indices, and
    ``HETSCHED_DEVICES`` (JSON, every class, FPGAs included) with ids, models and shares.

    ``devices`` holds (device, share, index within its class and vendor on the node)."""
    nvidia: list[str] = []
    amd: list[str] = []
    described = []
    for device, share, index in devices:
        if device.device_class == "gpu" and device.vendor.lower() == "nvidia":
            nvidia.append(str(index))
        elif device.device_class == "gpu" and device.vendor.lower() in {"amd", "ati"}:
            amd.append(str(index))
        described.append(
            {
                "id": device.id,
                "class": device.device_class,
                "vendor": device.vendor,
                "model": device.model,
                "index": index,
                "share": share,
            }
        )
    return {
        # an empty value hides every GPU from a task that was given none
        "CUDA_VISIBLE_DEVICES": ",".join(nvidia),
        "ROCR_VISIBLE_DEVICES": ",".join(amd),
        "HIP_VISIBLE_DEVICES": ",".join(amd),
        "HETSCHED_DEVICES": json.dumps(described, separators=(",", ":")),
    }


def open_task_log(path: Path) -> int:
    """Open a task's log for appending (later runs of the task append to it); the one
    opener of both executors (the Ray executor appends its tasks' output here too).

    An earlier run could have replaced the file in its job directory by a hard link to a
    file it can read, or by something that is not a file; appending to that would write
    into another file as the service. Such an entry is removed and a fresh file created
    (O_EXCL: if the entry comes back in between, the start fails rather than follow it).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NOCTTY
    create = flags | os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except FileNotFoundError:
        return os.open(path, create, 0o600)
    except OSError:
        fd = -1  # a symlink (ELOOP), a FIFO without a reader (ENXIO): replaced below
    if fd >= 0:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_uid == os.geteuid():
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
    os.unlink(path)
    return os.open(path, create, 0o600)


def exit_reason(code: int | None) -> str:
    """How an exit status reads (the same for every process executor)."""
    if code is None:
        return "exit status unknown"
    if code < 0:
        return f"killed by signal {-code}"
    if code > 128:
        return f"exit code {code} (signal {code - 128})"
    return f"exit code {code}"
