"""Where ``hetsched up`` runs tasks: this machine (the local process executor and the
machine's device watcher) or a Ray cluster (the Ray executor and the cluster's node
inventory). The rest of the service (the loop, the launcher, recovery, the API) drives
either through the same surfaces (:class:`~hetsched.drivers.executor.ProcessExecutor`,
:class:`~hetsched.agent.watcher.NodeWatcher`); this module is the only place that chooses.

What only the local executor offers is ``None`` on Ray: the overcommit guard (it measures
this machine's processes by pid) and federations' fencing (a lease file and a watchdog on
this machine).
"""

from __future__ import annotations

import logging
import math
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from hetsched.agent.executor import Executor
from hetsched.agent.guard import Guard
from hetsched.agent.logcap import LogCap
from hetsched.agent.watcher import DeviceWatcher, NodeWatcher
from hetsched.controlplane import SIMULATED_LABEL, Fencing
from hetsched.drivers.executor import ProcessExecutor
from hetsched.framework.profile import ProfileSpec
from hetsched.model.device import Node
from hetsched.model.specs import load_cluster_levels

if TYPE_CHECKING:
    from hetsched.service.options import Options

__all__ = [
    "EXECUTORS",
    "Engine",
    "check_executor",
    "local_engine",
    "ray_engine",
    "ray_link_in_clear",
]

log = logging.getLogger("hetsched.service")

#: where tasks run: this machine's processes, or a Ray cluster (docs/ray.md)
EXECUTORS = ("local", "ray")


@dataclass
class Engine:
    """The executor, the nodes at start, what reports their changes, and what only the
    local executor offers."""

    executor: ProcessExecutor
    nodes: list[Node]
    watcher: NodeWatcher
    #: the nodes as they are now, for a core built from scratch (a restart, a failed turn)
    current: Callable[[], list[Node]]
    #: starts the watcher's thread (after the loop's)
    start: Callable[[], None]
    guard: Guard | None = None
    fencing: Fencing | None = None
    #: where to say which nodes joined (the submission check), when nodes may join later
    on_joined: Callable[[Callable[[list[Node]], None]], None] | None = None
    #: network levels (node labels, broadest first) of the first cluster file declaring them
    levels: tuple[str, ...] = ()


def check_executor(options: Options) -> None:
    """Refuse options that do not go with the executor chosen (SystemExit naming them)."""
    if options.executor not in EXECUTORS:
        known = ", ".join(EXECUTORS)
        raise SystemExit(f"--executor must be one of {known}, got {options.executor!r}")
    if options.executor == "local":
        if options.ray_address is not None:
            raise SystemExit("--ray-address needs --executor ray")
        return
    if not options.ray_address:
        raise SystemExit("--executor ray needs --ray-address HOST:PORT (the Ray head's GCS)")
    local_only = {
        "--cluster": bool(options.cluster),
        "--demo": options.demo,
        "--fake-devices": options.fake_devices is not None,
        "--backend": options.device_backends is not None,
        "--node-name": options.node_name is not None,
        "--node-label": bool(options.node_labels),
    }
    given = [flag for flag, used in local_only.items() if used]
    if given:
        raise SystemExit(
            f"{', '.join(given)}: with --executor ray the nodes and their devices come from "
            "the Ray cluster (node labels; see docs/ray.md)"
        )


def local_engine(options: Options, home: Path, instance: str, profile: ProfileSpec) -> Engine:
    """This machine's devices (and the simulated nodes of ``--cluster``) and the process
    executor."""
    watcher = _watcher(options)
    local = watcher.initial()
    local = replace(local, labels={**local.labels, **options.node_labels})
    simulated: list[Node] = []
    levels = options.topology_levels
    for path in options.cluster:
        nodes, declared = load_cluster_levels(path)
        # marked, so that their devices are said to be unmeasured (controlplane/utilization.py)
        simulated += [replace(n, labels={**n.labels, SIMULATED_LABEL: "true"}) for n in nodes]
        levels = levels or declared
    # a fenced task's own watchdog waits for the service's SIGTERM and grace first
    backstop = math.ceil(options.kill_grace_s) + 2
    executor = Executor(
        home,
        instance,
        kill_grace_s=options.kill_grace_s,
        fence_backstop_s=backstop,
        logs=LogCap(options.max_log_bytes),
    )
    return Engine(
        executor,
        [local, *simulated],
        watcher,
        # the local node as the watcher sees it now: a rebuilt core keeps hot-plug changes
        lambda: [watcher.current(local), *simulated],
        watcher.start,
        _guard(profile, watcher, local.name),
        Fencing(home, backstop),
        levels=levels,
    )


def ray_engine(options: Options, home: Path, instance: str, profile: ProfileSpec) -> Engine:
    """A Ray cluster's nodes and the Ray task executor (docs/ray.md). SystemExit when the
    cluster cannot be reached."""
    from hetsched.ray.service import RayConnectError, open_cluster

    assert options.ray_address is not None
    clear = ray_link_in_clear(options.ray_address, os.environ)
    if clear is not None:
        log.warning("%s", clear)
    try:
        backend = open_cluster(
            options.ray_address,
            home,
            instance,
            options.kill_grace_s,
            discovery_timeout_s=options.ray_timeout_s,
            watch_interval_s=options.watch_interval_s,
        )
    except (ValueError, RayConnectError) as exc:
        raise SystemExit(str(exc)) from None
    nodes = backend.nodes

    def on_joined(hook: Callable[[list[Node]], None]) -> None:
        nodes.on_joined = hook

    return Engine(
        backend.executor,
        backend.initial,
        nodes,
        nodes.current,
        nodes.start,
        # its rounds run on the nodes, by their agents; this one publishes their alerts
        Guard(profile.guard, "ray") if profile.guard.enabled else None,
        on_joined=on_joined,
        # the Ray nodes' labels (``ray start --labels``) place them in the domains
        levels=options.topology_levels,
    )


def ray_link_in_clear(address: str, env: Mapping[str, str]) -> str | None:
    """A warning when the link to the Ray node agents (task commands, their environments
    and task tokens; exits and output back) leaves this machine without Ray's TLS; None
    when the head is on the loopback or ``RAY_USE_TLS`` is on."""
    host = address.rpartition(":")[0].strip("[]")
    if host in ("localhost", "::1") or host.startswith("127."):
        return None
    if env.get("RAY_USE_TLS", "").lower() in ("1", "true"):
        return None
    return (
        f"the Ray cluster at {address} is reached without TLS: task commands, environments "
        "and task tokens cross the network in clear; set RAY_USE_TLS=1, RAY_TLS_SERVER_CERT, "
        "RAY_TLS_SERVER_KEY and RAY_TLS_CA_CERT on every Ray node and for hetsched up "
        "(docs/security.md)"
    )


def _watcher(options: Options) -> DeviceWatcher:
    """The local node's device watcher, with the discovery backends asked for."""
    backends = options.device_backends or (
        ["cpu", "fake"] if options.fake_devices is not None else ["cpu"]
    )
    return DeviceWatcher.create(
        options.node_name or socket.gethostname() or "local",
        backends,
        options.sysfs_root,
        options.fake_devices,
        options.watch_interval_s,
    )


def _guard(profile: ProfileSpec, watcher: DeviceWatcher, node: str) -> Guard | None:
    """The profile's overcommit guard, reading GPU memory through NVML when it runs."""
    if not profile.guard.enabled:
        return None
    nvidia = next((b for b in watcher.backends if b.name == "nvidia"), None)
    return Guard(profile.guard, node, getattr(nvidia, "process_memory", None))
