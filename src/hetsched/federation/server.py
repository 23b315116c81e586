"""Assembling and running a federation: ``hetsched federation up``.

:func:`build` wires the store, the members, the core (members as nodes), the loop and the
API together (tests call it directly); :func:`serve` adds uvicorn and signal handling.
The API is ``hetsched up``'s (``controlplane/api/app.py``): the same routes, authentication, rate
limits, idempotent submissions and views, so ``hetsched submit``, ``jobs``, ``why``,
``cancel`` and ``logs`` work against a federation unchanged. What differs is behind them:
the loop sends jobs to members, logs are read from the member that runs the job, and a
job is refused at submission only when no member could ever hold it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import HTTPException
from sqlalchemy import Connection

from hetsched.cluster.state import ClusterState
from hetsched.controlplane import (
    Authenticator,
    ControlLoop,
    Feasibility,
    RateLimiter,
    Service,
    Store,
    Unsatisfiable,
    api_server,
    create_app,
    default_home,
    load_queues,
    quiet_signals,
    write_durably,
)
from hetsched.federation.hetsched_member import HetschedMember
from hetsched.federation.kube_member import KubernetesMember
from hetsched.federation.lease import LeaseBounds
from hetsched.federation.member import Member, MemberError
from hetsched.federation.members import MemberState, member_node
from hetsched.federation.plugins import Book, federation_plugins
from hetsched.federation.recovery import rejoin
from hetsched.federation.runner import MemberRunner
from hetsched.federation.spec import HetschedMemberSpec, MembersSpec, load_members
from hetsched.federation.worker import Worker
from hetsched.framework.profile import ProfileSpec, parse_profile
from hetsched.framework.registry import Registry, installed
from hetsched.framework.runtime import Framework
from hetsched.framework.speeds import load_speed_table
from hetsched.model.job import Job
from hetsched.model.specs import load_yaml
from hetsched.scheduler import NodeAdded, Scheduler
from hetsched.tls import ServerTls, TlsError, server_tls

__all__ = [
    "Built",
    "FederationOptions",
    "MemberFeasibility",
    "MemberLogs",
    "announce",
    "build",
    "check_tls",
    "close",
    "default_profile",
    "open_store",
    "serve",
]

log = logging.getLogger("hetsched.federation")

#: the filters a federation's profile always has first: members that take no new job, and
#: members none of whose nodes could hold the job
_REQUIRED_FILTERS = ("member-ready", "member-fits")


@dataclass
class FederationOptions:
    members: Path
    home: Path = field(default_factory=lambda: default_home() / "federation")
    host: str = "127.0.0.1"
    port: int = 8790
    db: str | None = None
    profile: Path | None = None
    queues: Path | None = None
    rate_limit: float = 200.0
    auth_failure_rate: float = 10.0
    sync: str = "FULL"
    seed: int = 0
    metrics_public: bool = False
    docs_public: bool = False
    #: seconds between renewals at each member (default: a fifth of the lease)
    renew_every_s: float | None = None
    #: serve HTTPS with this certificate chain and key; ask clients for a certificate of
    #: ``tls_client_ca``
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    #: lead a standby pair under this lease in the store (None: no standby)
    lease: str | None = None
    lease_s: float = 8.0
    #: the API's URL as the other process of a pair redirects to (default: host and port)
    advertise_url: str | None = None


@dataclass
class Built:
    service: Service
    loop: ControlLoop
    #: the members as the loop runs them (their states: ``runner.members_view``)
    runner: MemberRunner
    app: Any
    admin_token: str | None
    token_file: Path
    spec: MembersSpec
    #: the certificate and key the API is served with (None: plain HTTP)
    tls: ServerTls | None = None


def default_profile() -> dict[str, Any]:
    """The federation's profile without ``--profile``: the member filters, then the usual
    ones on each member's total capacity; the fastest model first, then the member that
    says it can start the job soonest, then the emptiest member."""
    return {
        "name": "federation",
        "filter": [*_REQUIRED_FILTERS, "fit", "node-selector", "taints"],
        "score": [
            {"name": "member-speed", "weight": 10},
            {"name": "member-start", "weight": 3},
            {"name": "spread", "weight": 1},
        ],
    }


def _profile(path: Path | None, registry: Registry) -> ProfileSpec:
    if path is None:
        return parse_profile(default_profile(), registry=registry)
    data = load_yaml(path) or {}
    if isinstance(data, dict):
        filters = list(data.get("filter", ["fit", "node-selector", "taints"]))
        names = [f if isinstance(f, str) else dict(f).get("name") for f in filters]
        missing = [name for name in _REQUIRED_FILTERS if name not in names]
        data = {**data, "filter": [*missing, *filters]}
    return parse_profile(data, path.parent, registry=registry)


def _member(spec: Any) -> Member:
    if isinstance(spec, HetschedMemberSpec):
        return HetschedMember(spec.name, spec.url, spec.token(), spec.timeout, verify=spec.verify())
    return KubernetesMember.from_spec(spec)


class MemberFeasibility(Feasibility):
    """A job is refused at submission only when every member's nodes are known and none
    could ever hold it (each member's reason is named)."""

    def __init__(self, members: Mapping[str, MemberState], book: Book) -> None:
        super().__init__([])
        self.members = members
        self.book = book

    def check(self, job: Job) -> None:
        problems = []
        for name, state in self.members.items():
            inventory = state.inventory
            if inventory is None:
                return  # not known yet: the member may hold it
            problem = self.book.member_problem(name, inventory, job)
            if problem is None:
                return
            problems.append(f"member {name}: {problem}")
        raise Unsatisfiable("no member could ever hold it: " + "; ".join(problems))


class MemberLogs:
    """A task's log read from the member that runs (or ran) the job's latest run."""

    def __init__(self, store: Store, specs: Mapping[str, Any]) -> None:
        self.store = store
        self.clients: dict[str, Member] = {name: _member(spec) for name, spec in specs.items()}

    def read(
        self, job_id: str, task: int, stream: str, offset: int, limit: int
    ) -> tuple[bytes, int]:
        rows = [t for t in self.store.job_tasks(job_id) if t["placement"].get("member_job")]
        if not rows:
            return b"", offset
        last = max(rows, key=lambda t: int(t["run"]))
        client = self.clients.get(str(last["node"]))
        if client is None:
            raise HTTPException(404, f"member {last['node']} is no longer a member")
        try:
            chunk = client.logs(last["placement"]["member_job"], task, stream, offset, limit)
        except MemberError as exc:
            raise HTTPException(503, f"member {last['node']}: {exc}") from None
        if chunk is None:
            raise HTTPException(404, f"member {last['node']} serves no logs")
        data = str(chunk.get("data", "")).encode()
        return data, int(chunk.get("offset", offset + len(data)))

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def _longest_lease(home: Path, lease_s: float) -> float:
    """The longest lease this federation ever renewed with (kept in ``<home>/lease``): a
    member may still hold an expiry that long from before a restart, whatever the lease is
    now, so the bounds start from it."""
    path = home / "lease"
    try:
        before = float(path.read_text().strip())
    except (OSError, ValueError):
        before = 0.0
    longest = max(before, lease_s)
    if longest != before:
        temporary = path.with_name("lease.tmp")
        temporary.write_text(f"{longest}\n")
        os.replace(temporary, path)
    return longest


def _token(store: Store, home: Path) -> tuple[str | None, Path]:
    """The admin token: made on the first start and written (synced) to the home; the
    file is never overwritten (a store without one stores the file's token again)."""
    token_file = home / "admin.token"
    if store.has_admin_token():
        return None, token_file
    kept = token_file.read_text().strip() if token_file.exists() else ""
    if kept:
        store.adopt_token(kept, "admin", admin=True)
        return None, token_file
    _token_id, token = store.create_token("admin", admin=True)
    write_durably(token_file, token + "\n")
    return token, token_file


def build(options: FederationOptions, fence: Callable[[Connection], None] | None = None) -> Built:
    """Open the store, build the core over the members and rebuild it from the store, start
    the member workers and the loop; returns the app to serve. ``fence`` runs first in
    every write transaction (a standby pair's leader: its lease's epoch)."""
    spec = load_members(options.members)
    tls = check_tls(options)
    home = options.home
    store = open_store(options)
    store.fence = fence
    book = Book()
    registry = installed().with_plugins(*federation_plugins(book))
    profile = _profile(options.profile, registry)
    book.table = load_speed_table(profile.speeds)
    core = Scheduler(ClusterState(), profile, seed=options.seed, registry=registry)
    now = time.time()
    period = options.renew_every_s or max(0.2, min(spec.lease / 5, 10.0))
    members: dict[str, MemberState] = {}
    runner_ref: list[MemberRunner] = []
    longest = _longest_lease(home, spec.lease)
    for member_spec in spec.members:
        bounds = LeaseBounds.starting(spec.lease, spec.margin, now, 30.0, longest)
        worker = Worker(
            _member(member_spec), spec.federation, bounds, period, lambda m: runner_ref[0].told(m)
        )
        queue = member_spec.queue if isinstance(member_spec, HetschedMemberSpec) else ""
        members[member_spec.name] = MemberState(
            member_spec.name, worker, dict(member_spec.labels), queue, bounds=bounds
        )
    rejoin(core, members, book, home)
    framework = Framework(profile, registry=registry)
    runner = MemberRunner(spec.federation, members, book, framework, home)
    runner_ref.append(runner)

    def make_core() -> Scheduler:
        """A fresh core with the members in it as they are now."""
        fresh = Scheduler(ClusterState(), profile, seed=options.seed, registry=registry)
        nodes = [NodeAdded(member_node(s)) for s in members.values() if s.in_core]
        fresh.handle(nodes, time.time())
        return fresh

    # a federation calls its core at least twice a second: members' states change between
    # posts (deadlines pass), which the core learns as events
    loop = ControlLoop(store, core, runner, make_core=make_core, tick_s=0.5)
    loop.recover(now)
    admin_token, token_file = _token(store, home)
    service = Service(
        store=store,
        loop=loop,
        executor=None,
        queues=load_queues(options.queues),
        feasibility=MemberFeasibility(members, book),
        auth=Authenticator(store),
        limiter=RateLimiter(options.rate_limit),
        auth_failures=RateLimiter(options.auth_failure_rate),
        metrics_public=options.metrics_public,
        docs_public=options.docs_public,
        logs=MemberLogs(store, {m.name: m for m in spec.members}),
    )
    loop.start()
    return Built(service, loop, runner, create_app(service), admin_token, token_file, spec, tls)


def check_tls(options: FederationOptions) -> ServerTls | None:
    """The API's certificate and key, checked before anything starts (SystemExit)."""
    try:
        return server_tls(options.tls_cert, options.tls_key, options.tls_client_ca)
    except TlsError as exc:
        raise SystemExit(str(exc)) from None


def open_store(options: FederationOptions) -> Store:
    """The home (private) and its store, migrated."""
    home = options.home
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(home, 0o700)
    store = Store(options.db or f"sqlite:///{home / 'federation.db'}", sync=options.sync)
    store.migrate()
    return store


def close(built: Built) -> None:
    built.loop.stop()
    logs = built.service.logs
    if isinstance(logs, MemberLogs):
        logs.close()
    built.service.store.close()


def serve(options: FederationOptions) -> None:
    """Run until SIGINT or SIGTERM. Jobs keep running on the members while the federation is
    down, for as long as its lease there; a restart within it takes them back."""

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # migrations speak only to fail
    built = build(options)
    announce(options, built)
    server = api_server(built.app, options.host, options.port, built.tls)
    quiet_signals()
    try:
        server.run()
    finally:
        close(built)
    print("hetsched federation: stopped; jobs keep running on the members for the lease")
    sys.stdout.flush()


def announce(options: FederationOptions, built: Built) -> None:
    """Say where the admin token is and where the API listens."""
    where = built.token_file
    print(
        f"admin token written to {where} (mode 0600)"
        if built.admin_token is not None
        else f"admin token: see {where}",
        flush=True,
    )
    names = ", ".join(m.name for m in built.spec.members)
    print(
        f"hetsched federation {built.spec.federation}: "
        f"{'https' if built.tls else 'http'}://{options.host}:{options.port} "
        f"in front of {names} (lease {built.spec.lease:g}s), home {options.home}",
        flush=True,
    )
