"""Assembling and running the service: ``hetsched up``.

:func:`build` wires store, core, executor, loop and API together (tests call it directly);
:func:`serve` adds uvicorn and signal handling.
"""

from __future__ import annotations

import gc
import logging
import os
import pwd
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from hetsched.agent.executor import RunAs
from hetsched.cluster.state import ClusterState
from hetsched.controlplane import (
    Authenticator,
    CheckpointProtocol,
    ControlLoop,
    Feasibility,
    ProcessRunner,
    RateLimiter,
    Service,
    SpeedLearner,
    Store,
    StoreRefused,
    api_server,
    create_app,
    load_queues,
    open_checked,
    quiet_signals,
    record_start,
    write_durably,
)
from hetsched.drivers import KeepsExits
from hetsched.framework.profile import ProfileSpec, load_profile
from hetsched.framework.speeds import load_speed_table
from hetsched.model.selector import warm as warm_selectors
from hetsched.plugins.stranding import profile_typicals
from hetsched.scheduler import Event, NodeAdded, Scheduler
from hetsched.service.banner import banner
from hetsched.service.engines import Engine, check_executor, local_engine, ray_engine
from hetsched.service.options import Options, default_home, examples_dir
from hetsched.tls import ServerTls, TlsError, server_tls

__all__ = [
    "Advertised",
    "Built",
    "Options",
    "announce",
    "build",
    "check_tls",
    "close",
    "default_home",
    "examples_dir",
    "open_home",
    "serve",
]

log = logging.getLogger("hetsched.service")


@dataclass
class Built:
    service: Service
    app: Any
    admin_token: str | None
    token_file: Path
    #: the certificate and key the API is served with (None: plain HTTP)
    tls: ServerTls | None = None
    #: what the loop runs tasks through
    runner: ProcessRunner | None = None


def _run_as_map(mapping: dict[str, str]) -> dict[str, RunAs] | None:
    if not mapping:
        return None
    if os.geteuid() != 0:
        raise SystemExit("--run-as needs the service to run as root")
    out: dict[str, RunAs] = {}
    for user, account in mapping.items():
        entry = pwd.getpwnam(account)
        if entry.pw_uid == 0:
            raise SystemExit(f"--run-as: {user} maps to root; jobs never run as root")
        out[user] = RunAs(entry.pw_uid, entry.pw_gid)
    return out


def _api_url(host: str, port: int, secure: bool = False) -> str:
    """How a task on this machine reaches the API (``hetsched checkpoint``)."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    scheme = "https" if secure else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


@dataclass(frozen=True)
class Advertised:
    """What tasks are told of the API: its URLs (this process's first, then its standby
    pair's others) and the CA bundle (PEM text) to verify them."""

    urls: tuple[str, ...]
    ca_pem: str | None

    @property
    def url(self) -> str:
        """This process's own URL (what a standby redirects to)."""
        return self.urls[0]

    @property
    def api(self) -> str:
        """``HETSCHED_API`` of its tasks: every URL, comma-separated."""
        return ",".join(self.urls)


def check_tls(options: Options) -> tuple[ServerTls | None, Advertised]:
    """The server's TLS and what tasks are told, checked before anything starts (a bad
    file is one line naming its option)."""
    try:
        tls = server_tls(options.tls_cert, options.tls_key, options.tls_client_ca)
    except TlsError as exc:
        raise SystemExit(str(exc)) from None
    given = options.advertise_url or _api_url(options.host, options.port, tls is not None)
    urls = tuple(u.strip().rstrip("/") for u in given.split(",") if u.strip())
    for url in urls or (given,):
        if not url.startswith(("http://", "https://")):
            raise SystemExit(f"--advertise-url: expected an http:// or https:// URL, got {url!r}")
    ca_pem = None
    if options.advertise_ca is not None:
        try:
            ca_pem = options.advertise_ca.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"--advertise-ca: cannot read {options.advertise_ca}: {exc}") from None
        if "-----BEGIN CERTIFICATE-----" not in ca_pem:
            raise SystemExit(f"--advertise-ca: {options.advertise_ca} is not a PEM CA bundle")
    return tls, Advertised(urls, ca_pem)


def build(options: Options, fence: Callable[[Connection], None] | None = None) -> Built:
    """Open the store, rebuild the core from it, and start the reconcile loop. ``fence``
    runs first in every write transaction (a standby pair's leader: its lease's epoch)."""
    check_executor(options)
    options = options.resolved()
    tls, advertised = check_tls(options)
    home = options.home
    store, instance = open_home(options)
    store.fence = fence
    profile = load_profile(options.profile)
    make_engine = ray_engine if options.executor == "ray" else local_engine
    try:
        engine = make_engine(options, home, instance, profile)
    except BaseException:
        store.close()
        raise
    nodes = engine.nodes
    speeds = SpeedLearner(load_speed_table(profile.speeds), store.speed_estimates())

    make_core = _core_maker(engine, profile, options.seed, speeds)
    run_as = _run_as_map(options.run_as)
    runner = _runner(options, engine, run_as, speeds, advertised)
    loop = ControlLoop(store, make_core(), runner, make_core=make_core)
    # the selector parser is built on first use; build it now, so the first submission
    # with a selector is not the one that pays for it
    warm_selectors()
    try:
        loop.recover()
        record_start(store, engine.current(), profile, options.seed)
    except Exception:
        store.close()
        raise
    token_file = home / "admin.token"
    admin_token = _admin_token(store, token_file)
    service = Service(
        store=store,
        loop=loop,
        executor=engine.executor,
        queues=load_queues(options.queues),
        feasibility=Feasibility(nodes),
        auth=Authenticator(store),
        limiter=RateLimiter(options.rate_limit),
        auth_failures=RateLimiter(options.auth_failure_rate),
        mapped_users=frozenset(run_as) if run_as is not None else None,
        metrics_public=options.metrics_public,
        docs_public=options.docs_public,
        fencing=engine.fencing,
        stranding=profile_typicals(profile),
        speeds=speeds,
    )
    if engine.on_joined is not None:
        engine.on_joined(service.feasibility.extend)
    loop.start()
    _start_engine(engine, service)
    return Built(service, create_app(service), admin_token, token_file, tls, runner)


def _core_maker(
    engine: Engine, profile: ProfileSpec, seed: int, speeds: SpeedLearner
) -> Callable[[], Scheduler]:
    """What builds the core afresh (at the start, and to rebuild it): the engine's nodes as
    they are now, its network levels, the profile's speeds plus those learned."""

    def make_core() -> Scheduler:
        state = ClusterState()
        if engine.levels:  # network levels from the cluster files
            state.set_topology(engine.levels)
        core = Scheduler(state, profile, seed=seed)
        core.speed_table = speeds.table()  # the profile's table plus learned job types
        core.handle([NodeAdded(node) for node in engine.current()], now=0.0)
        return core

    return make_core


def _runner(
    options: Options,
    engine: Engine,
    run_as: dict[str, RunAs] | None,
    speeds: SpeedLearner,
    advertised: Advertised,
) -> ProcessRunner:
    """The loop's runner: the engine's executor, watcher, guard and leases."""
    return ProcessRunner(
        engine.executor,
        engine.nodes,
        run_as=run_as,
        watcher=engine.watcher,
        guard=engine.guard,
        fencing=engine.fencing,
        checkpoints=_checkpoints(options, advertised),
        speeds=speeds,
    )


def _checkpoints(options: Options, advertised: Advertised) -> CheckpointProtocol | None:
    """The checkpoint protocol: whole with the local executor (tasks share the home);
    through the API alone on Ray, and only with --advertise-url (what the tasks' machines
    reach the API at)."""
    if options.executor == "local":
        return CheckpointProtocol(options.home, advertised.api, advertised.ca_pem)
    if options.advertise_url is None:
        return None
    return CheckpointProtocol(options.home, advertised.api, advertised.ca_pem, remote=True)


def _start_engine(engine: Engine, service: Service) -> None:
    """Start the engine's watcher, its changes going to the submission check first (a new
    device makes a job feasible) and then to the loop."""
    to_loop = engine.watcher.sink

    def devices_changed(events: list[Event]) -> None:
        service.feasibility.devices_added(events)
        if to_loop is not None:
            to_loop(events)

    engine.watcher.sink = devices_changed
    engine.start()


def open_home(options: Options) -> tuple[Store, str]:
    """The home folder (private), its store (migrated) and this instance's id."""
    home = options.home
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(home, 0o700)
    url = options.db or f"sqlite:///{home / 'hetsched.db'}"
    try:
        store = open_checked(home, url, options.sync, options.accept_empty_store)
    except StoreRefused as exc:
        raise SystemExit(f"hetsched up: {exc}") from None
    instance_file = home / "instance"
    if not instance_file.exists():
        write_durably(instance_file, secrets.token_hex(8))
    return store, instance_file.read_text().strip()


def _admin_token(store: Store, token_file: Path) -> str | None:
    """On the first start, an admin token, written to ``token_file`` (mode 0600, synced).
    The file is never overwritten: a store without an admin token (taken as it is with
    ``--accept-empty-store``) stores the token the file holds again."""
    if store.has_admin_token():
        return None
    kept = token_file.read_text().strip() if token_file.exists() else ""
    if kept:
        store.adopt_token(kept, "admin", admin=True)
        return None
    _token_id, token = store.create_token("admin", admin=True)
    write_durably(token_file, token + "\n")
    return token


def _freeze_heap() -> None:
    """Take what start-up built (modules, classes, the app, the core: ~150,000 objects)
    out of the cyclic garbage collector's sight. A full collection walks every tracked
    object: over that heap it took 45-75 ms, and whichever thread triggered it (the loop
    between committing a turn and spawning its tasks, a request) stalled as long; it was
    most of the submit-to-start tail. Collected first, so no garbage is frozen; what is
    frozen is still freed by reference counting when dropped. Only here, in the service's
    own process: tests that call :func:`build` keep their collector as it is."""
    gc.collect()
    gc.freeze()


def serve(options: Options) -> None:
    """Run until SIGINT or SIGTERM. Tasks keep running when the service stops; the next
    start adopts them (see docs/service.md)."""

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # the store's migrations say nothing at a first start unless one fails
    logging.getLogger("alembic").setLevel(logging.WARNING)
    built = build(options)
    announce(options, built)
    server = api_server(built.app, options.host, options.port, built.tls)
    quiet_signals()
    _freeze_heap()
    try:
        server.run()
    finally:
        close(built)
    print("hetsched up: stopped; running tasks keep running and are adopted on restart")
    sys.stdout.flush()


def announce(options: Options, built: Built) -> None:
    """Say where tasks run, where the API and the dashboard listen, where the admin token
    is, and the export lines another shell needs."""
    if os.geteuid() == 0 and not options.run_as:
        log.warning("running as root without --run-as: jobs run as root")
    if options.executor == "ray":
        loop = built.service.loop
        with loop.lock:
            names = ", ".join(sorted(node.name for node in loop.view.cluster.nodes)) or "none yet"
        print(f"tasks run on the Ray cluster at {options.ray_address}; nodes: {names}", flush=True)
    lines = banner(
        options.host,
        options.port,
        options.home,
        built.token_file,
        built.admin_token is not None,
        options.docs_public,
        "https" if built.tls is not None else "http",
    )
    print("\n".join(lines), flush=True)


def close(built: Built) -> None:
    """Stop the loop, let go of the tasks (they run on) and close the store; the exit
    journal goes when the store took everything (no outage at the stop)."""
    service = built.service
    service.loop.stop()
    executor = service.executor
    if executor is not None:
        executor.shutdown()
    if service.store.health.outage is None and isinstance(executor, KeepsExits):
        executor.forget_journal()
    service.store.close()
