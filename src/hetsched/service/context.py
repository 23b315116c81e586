"""The service's parts, as the HTTP routes, the submission path and the metrics see them."""

from __future__ import annotations

from dataclasses import dataclass

from hetsched.agent.executor import Executor
from hetsched.service.auth import Authenticator, RateLimiter
from hetsched.service.fencing import Fencing
from hetsched.service.loop import ControlLoop
from hetsched.service.queues import QueuesSpec
from hetsched.service.schemas import Feasibility
from hetsched.service.store import Store

__all__ = ["Service"]


@dataclass
class Service:
    """Everything the routes need, built by the server (or a test)."""

    store: Store
    loop: ControlLoop
    executor: Executor
    queues: QueuesSpec
    feasibility: Feasibility
    auth: Authenticator
    limiter: RateLimiter
    auth_failures: RateLimiter
    #: hetsched users that have an OS account, when jobs run as mapped users
    mapped_users: frozenset[str] | None = None
    #: serve ``/metrics`` without a token (``--metrics-public``)
    metrics_public: bool = False
    #: serve ``/docs``, ``/redoc`` and ``/openapi.json`` without a token (``--public-docs``)
    docs_public: bool = False
    #: the leases of federations that send jobs here (service/fencing.py)
    fencing: Fencing | None = None
