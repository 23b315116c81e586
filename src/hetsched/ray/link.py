"""The control plane's side of one node agent (:mod:`hetsched.ray.agent`): creating it or
finding it again by name, and what the executor holds for it between turns (the calls to
send, the long poll in flight).

An agent is named ``agent-<Ray node id>`` in the control plane's namespace
(``hetsched-<instance>``), detached (it outlives the control plane), pinned to its node by
hard node affinity, asking Ray for no CPU, GPU or memory (hetsched did the accounting), and
restarted by Ray when it dies while its node lives (``max_restarts=-1``): the new agent finds
the tasks of the old one (see the agent's module docstring).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hetsched.drivers.executor import Start, Stop
from hetsched.ray.agent import NodeAgent

__all__ = ["LOOKUP_TIMEOUT_S", "AgentLink", "agent_name", "create_agent", "find_agent", "gather"]

log = logging.getLogger("hetsched.ray.executor")

#: seconds to wait for agents' answers when adopting or looking for tasks
LOOKUP_TIMEOUT_S = 15.0
#: the agent as a Ray actor class, made once per process
_agent_class: list[Any] = []


def agent_name(node_id: str) -> str:
    return f"agent-{node_id}"


def create_agent(
    node_id: str,
    namespace: str,
    instance: str,
    home: str,
    kill_grace_s: float,
    discovery: Sequence[str] | None = None,
    watch_interval_s: float = 2.0,
) -> Any:
    """The agent of Ray node ``node_id``: the running one, or a new one (hard affinity; no
    CPU, GPU or memory asked of Ray) watching the node's devices with the ``discovery``
    backends every ``watch_interval_s`` (None: no watch)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import ray

    if not _agent_class:
        _agent_class.append(ray.remote(NodeAgent))
    return (
        _agent_class[0]
        .options(
            name=agent_name(node_id),
            namespace=namespace,
            get_if_exists=True,
            lifetime="detached",
            num_cpus=0,
            num_gpus=0,
            memory=0,
            max_restarts=-1,
            max_task_retries=0,
            max_concurrency=64,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        )
        .remote(instance, node_id, home, kill_grace_s, discovery, watch_interval_s)
    )


def find_agent(node_id: str, namespace: str) -> Any:
    """The running agent of Ray node ``node_id``, or None."""
    import ray

    try:
        return ray.get_actor(agent_name(node_id), namespace=namespace)
    except ValueError:
        return None


def gather(calls: Mapping[Any, str], timeout_s: float = LOOKUP_TIMEOUT_S) -> dict[str, Any]:
    """Each call's answer by its name; calls that fail or do not answer in time are left
    out."""
    import ray

    if not calls:
        return {}
    ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=timeout_s)
    out: dict[str, Any] = {}
    for ref in ready:
        try:
            out[calls[ref]] = ray.get(ref)
        except Exception as exc:
            log.info("agent of node %s does not answer: %s", calls[ref], exc)
    return out


@dataclass
class AgentLink:
    """One agent as the executor holds it: its actor, the tasks it watches there, what to
    send it at the next poll, and its long poll in flight."""

    node_id: str
    actor: Any
    keys: set[str] = field(default_factory=set)
    starts: list[Start] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)
    #: the next guard round for its node: (the guard's spec, its tasks), as plain data
    guard: tuple[dict[str, Any], list[dict[str, Any]]] | None = None
    #: exits the last poll reported: acknowledged from the next poll on (the driver has
    #: recorded them by then)
    reported: list[str] = field(default_factory=list)
    #: exits reported by an earlier poll, to acknowledge with the next long poll
    acks: list[str] = field(default_factory=list)
    #: the long poll in flight (an ObjectRef), and the earliest time for the next
    call: Any = None
    next_call: float = 0.0
    #: when the long poll in flight was sent; when the agent last failed to answer (None:
    #: it answers)
    called_at: float = 0.0
    failing_since: float | None = None
    #: its node died: nothing more is sent
    dead: bool = False
    #: the version of the node's device answer last taken from the agent (0: none yet)
    devices_seen: int = 0

    @property
    def pending(self) -> bool:
        return bool(self.starts or self.stops or self.kills or self.guard)

    def flush(self) -> None:
        """Send the turn's starts, stops, kills and guard round, one call each (their
        results come back through the long poll)."""
        if self.starts:
            self.actor.start.remote(self.starts)
            self.starts = []
        if self.stops:
            self.actor.stop.remote(self.stops)
            self.stops = []
        if self.kills:
            self.actor.kill.remote(self.kills)
            self.kills = []
        if self.guard:
            self.actor.guard.remote(*self.guard)
            self.guard = None
