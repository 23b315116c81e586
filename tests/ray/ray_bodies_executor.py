"""Bodies of the Ray executor tests; they run inside a namespace next to a local cluster."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from hetsched.agent.executor import local_indices
from hetsched.cluster.placement import DeviceShare, Placement
from hetsched.drivers import Exit, Launch, Start, Stop
from hetsched.keys import TaskKey
from hetsched.model.device import Device, Node
from hetsched.ray import _api
from hetsched.ray.executor import RayExecutor
from hetsched.ray.inventory import RayInventory
from hetsched.ray.local import LocalCluster, LocalNodeSpec
from hetsched.ray.testing import ClusterInfo, kill_raylet

#: prints what the task sees of itself, one JSON line
SHOW = (
    "import json, os; print(json.dumps({"
    "'env': {k: v for k, v in os.environ.items() if k.startswith(('HETSCHED_', 'CUDA_', 'ROCR_',"
    " 'HIP_', 'MINE', 'RAY_'))}, 'pid': os.getpid(), 'ppid': os.getppid(),"
    " 'pgid': os.getpgid(0), 'sid': os.getsid(0), 'cwd': os.getcwd(),"
    " 'gppid': int(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])}))"
)


def _setup(
    cluster: ClusterInfo, instance: str, **options: Any
) -> tuple[RayInventory, RayExecutor, dict[str, Node]]:
    _api.connect(cluster.address)
    inventory = RayInventory()
    nodes = {n.name: n for n in inventory.initial(timeout_s=90)}
    base = Path(options.pop("home", cluster.scratch))
    executor = RayExecutor(
        base / "home",
        instance,
        inventory.node_id,
        kill_grace_s=1.0,
        node_dir=str(base / "nodes"),
        **options,
    )
    return inventory, executor, nodes


def _devices(node: Node, shares: dict[int, int]) -> list[tuple[Device, int, int]]:
    """(device, share, index) of the node's GPUs by position, as the service passes them."""
    index = local_indices(node.devices)
    gpus = [d for d in node.devices if d.device_class == "gpu"]
    return [(gpus[i], share, index[gpus[i].id]) for i, share in shares.items()]


def _start(
    executor: RayExecutor,
    node: Node,
    command: list[str],
    job: str = "job1",
    task: int = 0,
    run: int = 1,
    shares: dict[int, int] | None = None,
    **kwargs: Any,
) -> str:
    devices = _devices(node, shares or {})
    placement = Placement(
        node.name, 1000, 256, tuple(DeviceShare(d.id, share) for d, share, _ in devices)
    )
    launch = Launch(tuple(command), kwargs.pop("env", {}), devices=tuple(devices), **kwargs)
    key = TaskKey(job, task, run)
    executor.start([Start(key, placement, launch=launch)], time.time())
    return str(key)


def _stop(executor: RayExecutor, key: str, grace_s: float | None = None) -> None:
    """Stop one task through the executor protocol (``grace_s`` None: the executor's)."""
    grace = executor.kill_grace_s if grace_s is None else grace_s
    task = TaskKey.parse(key)
    executor.stop([Stop(task, Placement("n", 0, 0), 0.0, grace, "stopped")], time.time())


def _wait(executor: RayExecutor, count: int = 1, timeout_s: float = 60) -> list[Exit]:
    deadline = time.monotonic() + timeout_s
    exits: list[Exit] = []
    while time.monotonic() < deadline:
        exits += executor.poll()
        if len(exits) >= count:
            return exits
        time.sleep(0.05)
    raise AssertionError(f"{len(exits)} of {count} exits in {timeout_s} s: {exits}")


def _close(executor: RayExecutor) -> None:
    """The exits in hand are recorded (a driver commits them before polling again): one
    more poll acknowledges them to their agents, then the executor shuts down."""
    assert executor.poll() == []
    executor.shutdown()


def _exit(e: Exit) -> list[Any]:
    return [e.job_id, e.task, e.run, e.exit_code, e.stopped, e.reason]


def _log(executor: RayExecutor, job: str, task: int = 0, stream: str = "stdout") -> str:
    return executor.log_path(job, task, stream).read_text()


def _ray_view(executor: RayExecutor, key: str) -> dict[str, Any]:
    import ray

    agent = executor.links[executor.handles[key].node_id].actor
    view: dict[str, Any] = ray.get(agent.ray_view.remote(), timeout=60)
    view["tasks"] = ray.get(agent.tasks.remote(), timeout=60)
    return view


def _node_files(cluster: ClusterInfo, timeout_s: float = 30) -> list[str]:
    """The task files left on the nodes once the agents have had the acknowledgements (they
    come with the next long poll: waited for, bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = sorted(str(p) for p in (Path(cluster.scratch) / "nodes").rglob("*") if p.is_file())
        if not files or time.monotonic() > deadline:
            return files
        time.sleep(0.1)


def placement(cluster: ClusterInfo) -> dict[str, Any]:
    """Tasks land on the chosen node with the chosen devices, seen from the task and Ray."""
    import ray

    _inventory, executor, nodes = _setup(cluster, "placement")
    show = [sys.executable, "-c", SHOW]
    key_a = _start(executor, nodes["a100-0"], show, "job-a", shares={1: 1000}, env={"MINE": "1"})
    key_t = _start(executor, nodes["t4-0"], show, "job-t", shares={0: 500})
    key_c = _start(executor, nodes["cpu-0"], show, "job-c")
    executor.poll()  # the starts go to the agents
    views = {key: _ray_view(executor, key) for key in (key_a, key_t, key_c)}
    exits = _wait(executor, 3)
    seen = {
        job: json.loads(_log(executor, job).splitlines()[-1]) for job in ("job-a", "job-t", "job-c")
    }
    _close(executor)
    return {
        "exits": sorted(_exit(e) for e in exits),
        "seen": seen,
        "views": views,
        "node_ids": cluster.node_ids,
        "headers": {job: _log(executor, job).splitlines()[0] for job in seen},
        "node_files_left": _node_files(cluster),
        "actors": sorted(
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == executor.namespace
        ),
        "used": ["a100-0", "t4-0", "cpu-0"],
    }


def gang(cluster: ClusterInfo) -> dict[str, Any]:
    """Two tasks of one job on two Ray nodes, running at the same time: each waits for the
    other's mark before it exits."""
    _inventory, executor, nodes = _setup(cluster, "gang")
    rendezvous = Path(cluster.scratch) / "rendezvous"
    rendezvous.mkdir()
    script = (
        "import os, sys, time, pathlib; d = pathlib.Path(sys.argv[1]);"
        " (d / os.environ['HETSCHED_TASK_INDEX']).touch();"
        " end = time.monotonic() + 60\n"
        "while len(list(d.iterdir())) < 2 and time.monotonic() < end: time.sleep(0.05)\n"
        "print(os.environ['HETSCHED_NODE'], os.environ['CUDA_VISIBLE_DEVICES'])\n"
        "sys.exit(0 if len(list(d.iterdir())) == 2 else 3)"
    )
    command = [sys.executable, "-c", script, str(rendezvous)]
    _start(executor, nodes["a100-0"], command, "gang", 0, shares={0: 1000, 1: 1000})
    _start(executor, nodes["t4-0"], command, "gang", 1, shares={0: 1000})
    exits = _wait(executor, 2, 90)
    _close(executor)
    return {
        "exits": sorted(_exit(e) for e in exits),
        "lines": [_log(executor, "gang", t).splitlines()[-1] for t in (0, 1)],
    }


def exits_and_logs(cluster: ClusterInfo) -> dict[str, Any]:
    """Exit codes, logs, a missing program, the maximum runtime, an unknown node."""
    _inventory, executor, nodes = _setup(cluster, "exits-and-logs")
    node = nodes["cpu-0"]
    _start(executor, node, ["sh", "-c", "echo out; echo err >&2; exit 4"], "codes")
    _start(executor, node, ["/no/such/program"], "missing")
    _start(executor, node, ["sleep", "30"], "slow", max_runtime_s=1.0)
    _start(executor, node, ["sh", "-c", "kill -KILL $$"], "signalled")
    exits = {e.job_id: _exit(e) for e in _wait(executor, 4, 90)}
    # a task Ray will not take is reported by the next poll as one that could not start
    _start(executor, Node("nowhere", 1000, 1024), ["true"], "lost")
    (refused,) = executor.poll()
    assert refused.job_id == "lost" and not refused.succeeded
    unknown = refused.reason.removeprefix("cannot start: ")
    _close(executor)
    return {
        "exits": exits,
        "out": _log(executor, "codes"),
        "err": _log(executor, "codes", stream="stderr"),
        "missing_err": _log(executor, "missing", stream="stderr"),
        "mode": oct(executor.log_path("codes", 0, "stdout").stat().st_mode & 0o777),
        "unknown": unknown,
    }


def planted_logs(cluster: ClusterInfo) -> dict[str, Any]:
    """A hard link to another file planted under a task's log name, before the task starts
    (an earlier run's leftover) and by the task itself while it runs: the control plane
    never appends through it."""
    _inventory, executor, nodes = _setup(cluster, "planted-logs")
    node = nodes["cpu-0"]
    victims = {}
    for job in ("before", "during"):
        victims[job] = Path(cluster.scratch) / f"victim-{job}.txt"
        victims[job].write_text("untouched\n")
    early = executor.log_path("before", 0, "stdout")
    early.parent.mkdir(parents=True, exist_ok=True)
    os.link(victims["before"], early)
    _start(executor, node, ["echo", "written"], "before")
    late = executor.log_path("during", 0, "stdout")
    # the header is written before the task starts; its output after the link is planted
    script = f"rm -f '{late}'; ln '{victims['during']}' '{late}'; echo written"
    _start(executor, node, ["sh", "-c", script], "during")
    exits = [_exit(e) for e in _wait(executor, 2, 90)]
    _close(executor)
    return {
        "exits": sorted(exits),
        "victims": {job: path.read_text() for job, path in victims.items()},
        "links": {job: executor.log_path(job, 0, "stdout").lstat().st_nlink for job in victims},
        "logs": {job: _log(executor, job) for job in victims},
    }


def stops(cluster: ClusterInfo) -> dict[str, Any]:
    """Cancel (SIGTERM), a graceful stop within the grace, and escalation to SIGKILL that
    reaches grandchildren."""
    _inventory, executor, nodes = _setup(cluster, "stops")
    node = nodes["cpu-0"]
    plain = _start(executor, node, ["sleep", "60"], "plain")
    graceful = _start(
        executor, node, ["sh", "-c", "trap 'echo bye; exit 0' TERM; sleep 30 & wait"], "graceful"
    )
    stubborn = _start(
        executor,
        node,
        ["sh", "-c", "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60"],
        "stubborn",
    )
    # wait until each has its process group (the first answers carry the pids)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(h.pid for h in executor.handles.values()):
        executor.poll()
        time.sleep(0.05)
    groups = {key: executor.handles[key].pid for key in (plain, graceful, stubborn)}
    # until each shell has started its children (so its trap is set): a fixed pause may
    # end before on a busy machine, and a SIGTERM then ends the graceful one with -15
    wanted = {plain: 1, graceful: 2, stubborn: 3}
    while True:
        family = {
            key: [p.pid for p in psutil.process_iter() if _pgid(p.pid) == pgid]
            for key, pgid in groups.items()
        }
        if all(len(family[k]) >= n for k, n in wanted.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    _stop(executor, plain)
    _stop(executor, graceful, grace_s=10)
    _stop(executor, stubborn, grace_s=0.5)
    exits = {e.job_id: _exit(e) for e in _wait(executor, 3, 90)}
    time.sleep(0.5)
    left = {key: [pid for pid in pids if psutil.pid_exists(pid)] for key, pids in family.items()}
    _close(executor)
    return {
        "exits": exits,
        "family": family,
        "left": left,
        "graceful_out": _log(executor, "graceful"),
    }


def start_and_die(cluster: ClusterInfo, state: str) -> None:
    """Start tasks, then SIGKILL this driver (the control plane's crash): one task ends while
    no driver watches, one runs on, one is in the middle of its output, and one has had its
    exit reported (and recorded, say) by the last poll, its actor not retired yet."""
    _inventory, executor, nodes = _setup(cluster, "crash", home=state)
    node = nodes["cpu-0"]
    lines = "i=1; while [ $i -le 40 ]; do echo line $i; i=$((i+1)); sleep 0.1; done"
    keys = {
        "ends": _start(executor, node, ["sh", "-c", "sleep 6; echo done; exit 5"], "ends"),
        "runs": _start(executor, node, ["sleep", "120"], "runs"),
        "talks": _start(executor, node, ["sh", "-c", lines], "talks"),
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        executor.handles[keys["talks"]].received[0] < 60
        or not all(h.pid for h in executor.handles.values())
    ):
        assert executor.poll() == []
        time.sleep(0.05)
    keys["reported"] = _start(executor, node, ["sh", "-c", "exit 7"], "reported")
    reported = _wait(executor, 1, 60)
    pids = {name: executor.handles[key].pid for name, key in keys.items() if name != "reported"}
    Path(state, "keys.json").write_text(
        json.dumps({"keys": keys, "reported": [_exit(e) for e in reported], "pids": pids})
    )
    os.kill(os.getpid(), signal.SIGKILL)


def adopt_after_crash(cluster: ClusterInfo, state: str) -> dict[str, Any]:
    """A new control plane finds the tasks again: adopts the live ones (nothing started
    twice), learns the exit of the one that ended meanwhile once, and sweeps the one whose
    exit was already recorded."""
    import ray

    _inventory, executor, _nodes = _setup(cluster, "crash", home=state)
    before = json.loads(Path(state, "keys.json").read_text())
    keys, reported = before["keys"], before["reported"]
    recorded = {tuple(e[:3]) for e in reported}
    leaders = executor.find_leaders()
    live = [k for k in leaders if tuple(_split(k)) not in recorded]
    adopted = {}
    for key in live:
        job, task, run = _split(key)
        handle = executor.adopt(job, task, run, leaders[key][0], leaders[key][1], None)
        adopted[key] = handle.pid if handle is not None else None
    swept = executor.sweep(live)
    exits = _wait(executor, 2, 90)  # "ends" (ended meanwhile) and "talks"
    _stop(executor, keys["runs"])
    exits += _wait(executor, 1, 60)
    # nothing more comes, whatever the polls
    extra = []
    for _ in range(20):
        extra += executor.poll()
        time.sleep(0.05)
    # the acknowledgements reach the agent with its next long poll: once it has them it
    # holds nothing of these tasks (bounded wait)
    deadline = time.monotonic() + 30
    mine = set(keys.values())
    while True:
        executor.poll()
        held = [ray.get(link.actor.tasks.remote(), timeout=30) for link in executor.links.values()]
        names_left = sorted(key for tasks in held for key in tasks if key in mine)
        if not names_left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    _close(executor)
    return {
        "keys": keys,
        "pids_before": before["pids"],
        "reported_before": reported,
        "leaders": sorted(leaders),
        "adopted": adopted,
        "swept": swept,
        "exits": sorted(_exit(e) for e in exits),
        "extra": [_exit(e) for e in extra],
        "talks": _log(executor, "talks"),
        "names_left": names_left,
    }


def node_dies(cluster: ClusterInfo) -> dict[str, Any]:
    """A raylet killed under a running task: the task is lost, with its node named, and its
    process does not outlive its actor; tasks elsewhere run on."""
    # no driver here stops the lost task: its exit comes after the (short) wait
    inventory, executor, nodes = _setup(cluster, "node-dies", node_loss_wait_s=0.5)
    extra = LocalCluster([LocalNodeSpec("h100-0", "H100", 1)], join=cluster.address)
    extra.start()
    try:
        deadline = time.monotonic() + 60
        while inventory.node_id("h100-0") is None and time.monotonic() < deadline:
            inventory.poll()
            time.sleep(0.2)
        doomed_node = next(n for n in inventory.nodes() if n.name == "h100-0")
        doomed = _start(executor, doomed_node, ["sleep", "120"], "doomed", shares={0: 1000})
        safe = _start(executor, nodes["cpu-0"], ["sleep", "120"], "safe")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(h.pid for h in executor.handles.values()):
            executor.poll()
            time.sleep(0.05)
        pid = executor.handles[doomed].pid
        kill_raylet(ClusterInfo(cluster.address, {}, extra.pids(), "", ""), "h100-0")
        lost = _wait(executor, 1, 120)
        time.sleep(1.0)
        alive_after = psutil.pid_exists(pid) and _pgid(pid) == pid
        still = sorted(executor.handles)
        _stop(executor, safe)
        stopped = _wait(executor, 1, 60)
        _close(executor)
        return {
            "lost": [_exit(e) for e in lost],
            "task_alive_after": alive_after,
            "still_running": still,
            "safe": [_exit(e) for e in stopped],
            "doomed": doomed,
        }
    finally:
        extra.stop()


def _split(key: str) -> tuple[str, int, int]:
    job, rest = key.rsplit("/", 1)
    task, run = rest.split("#")
    return job, int(task), int(run)


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1
