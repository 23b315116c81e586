"""The Ray side of the Ray executor's task actors: creating one (named by its task key in
the control plane's namespace, pinned to its node, asking Ray for nothing), finding them
again by name, and asking them their status."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hetsched.ray.handle import short
from hetsched.ray.runner import TaskRunner

__all__ = ["LOOKUP_TIMEOUT_S", "actor_named", "actor_names", "create_actor", "statuses"]

log = logging.getLogger("hetsched.ray.executor")

#: seconds to wait for an actor's answer when adopting or looking for tasks
LOOKUP_TIMEOUT_S = 10.0
#: threads per runner actor: a long poll, a signal, a status and retire at once
_RUNNER_THREADS = 4
#: the runner as a Ray actor class, made once per process
_runner: list[Any] = []


def create_actor(key: str, namespace: str, node_id: str, spec: dict[str, Any]) -> Any:
    """A detached runner actor for one task on Ray node ``node_id`` (hard affinity; no CPU,
    GPU or memory asked of Ray: hetsched did the accounting)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import ray

    if not _runner:
        _runner.append(ray.remote(TaskRunner))
    return (
        _runner[0]
        .options(
            name=key,
            namespace=namespace,
            lifetime="detached",
            num_cpus=0,
            num_gpus=0,
            memory=0,
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=_RUNNER_THREADS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        )
        .remote(spec)
    )


def actor_names(namespace: str) -> list[str]:
    """The names (task keys) of the actors in ``namespace``."""
    import ray

    listed: list[dict[str, str]] = ray.util.list_named_actors(all_namespaces=True)
    return [a["name"] for a in listed if a.get("namespace") == namespace]


def actor_named(key: str, namespace: str) -> Any:
    """The actor named ``key`` in ``namespace``, or None."""
    import ray

    try:
        return ray.get_actor(key, namespace=namespace)
    except ValueError:
        return None


def statuses(actors: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each actor's status; those that do not answer in time are left out."""
    import ray

    calls = {actor.status.remote(): key for key, actor in actors.items()}
    if not calls:
        return {}
    ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=LOOKUP_TIMEOUT_S)
    out: dict[str, dict[str, Any]] = {}
    for ref in ready:
        try:
            out[calls[ref]] = ray.get(ref)
        except Exception as exc:
            log.info("task %s: its actor does not answer: %s", calls[ref], short(exc))
    return out
