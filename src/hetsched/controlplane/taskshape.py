"""What a task learns of its job's shape from its environment: its count and rank (every
job; an elastic job's count is the one its run has), and for a heterogeneous job its group,
its index in the group and where every task of the job listens.

- ``HETSCHED_REPLICAS``: how many tasks the run has; ``HETSCHED_RANK``: the task's index;
- ``HETSCHED_GROUP``, ``HETSCHED_GROUP_INDEX``: its group and its index there (jobs with
  ``groups``);
- ``HETSCHED_HOST``, ``HETSCHED_PORT``: where it should listen, and ``HETSCHED_PEERS``
  (JSON ``{"<group>": [{"index": 0, "host": ..., "port": ...}, ...], ...}``): where every
  task of the run listens, so a driver can reach its workers.

A host is the node's ``hetsched.io/address`` label, else ``127.0.0.1`` where tasks run on
this machine (the local executor), else the node's name. A port is one the operating system
had free on this machine when the run started; no two tasks on one host get the same one
(a port probed and closed may be handed out again, so each is checked against the others).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence

from hetsched.drivers import Start
from hetsched.keys import TaskKey
from hetsched.model.job import Job

__all__ = ["ADDRESS_LABEL", "Addresses", "free_port", "peers", "shape_env"]

#: the node label a task's peers reach it at
ADDRESS_LABEL = "hetsched.io/address"

#: task -> (host, port) of the tasks of runs with groups started in one launch
Addresses = dict[TaskKey, tuple[str, int]]


def free_port() -> int:
    """A TCP port the operating system has free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def peers(
    starts: Sequence[Start], job_of: Callable[[str], Job | None], host_of: Callable[[str], str]
) -> tuple[Addresses, dict[tuple[str, int], str]]:
    """The address of each task of a job with groups among ``starts`` (one launch: a run of
    such a job starts whole), and the ``HETSCHED_PEERS`` of each of those runs."""
    addresses: Addresses = {}
    runs: dict[tuple[str, int], dict[str, list[dict[str, object]]]] = {}
    taken: set[tuple[str, int]] = set()
    for start in starts:
        key = start.key
        job = job_of(key.job)
        found = job.group_of(key.task) if job is not None else None
        if found is None:
            continue
        group, index = found
        host, port = host_of(start.placement.node), free_port()
        while (host, port) in taken:  # a closed probe's port may come back: never twice
            port = free_port()
        taken.add((host, port))
        addresses[key] = (host, port)
        listed = runs.setdefault((key.job, key.run), {}).setdefault(group.name, [])
        listed.append({"index": index, "host": host, "port": port})
    text = {}
    for run, groups in runs.items():
        for listed in groups.values():
            listed.sort(key=lambda entry: int(str(entry["index"])))
        text[run] = json.dumps(groups, separators=(",", ":"), sort_keys=True)
    return addresses, text


def shape_env(
    start: Start, job: Job, addresses: Addresses, peer_text: dict[tuple[str, int], str]
) -> dict[str, str]:
    """The shape variables of ``start``'s task (see the module docstring)."""
    key = start.key
    env = {
        "HETSCHED_REPLICAS": str(start.replicas or job.replicas),
        "HETSCHED_RANK": str(key.task),
    }
    found = job.group_of(key.task)
    if found is not None:
        env["HETSCHED_GROUP"] = found[0].name
        env["HETSCHED_GROUP_INDEX"] = str(found[1])
        address = addresses.get(key)
        if address is not None:
            env["HETSCHED_HOST"], env["HETSCHED_PORT"] = address[0], str(address[1])
            env["HETSCHED_PEERS"] = peer_text[(key.job, key.run)]
    return env
