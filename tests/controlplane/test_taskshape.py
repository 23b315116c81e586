"""The shape variables of a job with groups: every task of a run gets its own address, and
the same peers map; outcomes computed by hand."""

from __future__ import annotations

import json

from hetsched.cluster.placement import Placement
from hetsched.controlplane.taskshape import peers
from hetsched.drivers import Start
from hetsched.keys import TaskKey
from hetsched.model.job import Job, TaskGroup, TaskRequest

DRIVER = TaskRequest(8000)
WORKER = TaskRequest(1000)


def test_the_tasks_of_a_run_on_one_host_never_share_a_port() -> None:
    # 999 workers and a driver on one node: 1000 ports probed one by one, where the
    # operating system may hand out a port again once its probe is closed
    groups = (TaskGroup("driver", 1, DRIVER), TaskGroup("workers", 999, WORKER))
    job = Job("h", DRIVER, replicas=1000, groups=groups)
    starts = [Start(TaskKey("h", t, 1), Placement("n0", 1000, 0)) for t in range(1000)]
    addresses, text = peers(starts, lambda _: job, lambda node: "10.0.0.1")
    ports = [port for _, port in addresses.values()]
    assert len(ports) == 1000 and len(set(ports)) == 1000
    listed = json.loads(text[("h", 1)])
    assert [e["index"] for e in listed["workers"]] == list(range(999))
    assert listed["driver"] == [
        {"index": 0, "host": "10.0.0.1", "port": addresses[starts[0].key][1]}
    ]
