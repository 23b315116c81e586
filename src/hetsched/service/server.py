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
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    create_app,
    load_queues,
)
from hetsched.framework.profile import load_profile
from hetsched.framework.speeds import load_speed_table
from hetsched.model.selector import warm as warm_selectors
from hetsched.plugins.stranding import profile_typicals
from hetsched.scheduler import Event, NodeAdded, Scheduler
from hetsched.service.engines import Engine, check_executor, local_engine, ray_engine
from hetsched.service.options import Options, default_home, examples_dir

__all__ = ["Options", "build", "default_home", "examples_dir", "serve"]

log = logging.getLogger("hetsched.service")


@dataclass
class Built:
    service: Service
    app: Any
    admin_token: str | None
    token_file: Path


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


def _api_url(host: str, port: int) -> str:
    """How a task on this machine reaches the API (``hetsched checkpoint``)."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def build(options: Options) -> Built:
    """Open the store, rebuild the core from it, and start the reconcile loop."""
    check_executor(options)
    options = options.resolved()
    home = options.home
    store, instance = _open_home(options)
    profile = load_profile(options.profile)
    make_engine = ray_engine if options.executor == "ray" else local_engine
    try:
        engine = make_engine(options, home, instance, profile)
    except BaseException:
        store.close()
        raise
    nodes = engine.nodes
    speeds = SpeedLearner(load_speed_table(profile.speeds), store.speed_estimates())

    def make_core() -> Scheduler:
        state = ClusterState()
        if engine.levels:  # network levels from the cluster files
            state.set_topology(engine.levels)
        core = Scheduler(state, profile, seed=options.seed)
        core.speed_table = speeds.table()  # the profile's table plus learned job types
        core.handle([NodeAdded(node) for node in engine.current()], now=0.0)
        return core

    run_as = _run_as_map(options.run_as)
    runner = _runner(options, engine, run_as, speeds)
    loop = ControlLoop(store, make_core(), runner, make_core=make_core)
    # the selector parser is built on first use; build it now, so the first submission
    # with a selector is not the one that pays for it
    warm_selectors()
    try:
        loop.recover()
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
    return Built(service, create_app(service), admin_token, token_file)


def _runner(
    options: Options, engine: Engine, run_as: dict[str, RunAs] | None, speeds: SpeedLearner
) -> ProcessRunner:
    """The loop's runner: the engine's executor, watcher, guard and leases."""
    return ProcessRunner(
        engine.executor,
        engine.nodes,
        run_as=run_as,
        watcher=engine.watcher,
        guard=engine.guard,
        fencing=engine.fencing,
        # the checkpoint protocol needs the service home on the task's machine: local only
        checkpoints=(
            CheckpointProtocol(options.home, _api_url(options.host, options.port))
            if options.executor == "local"
            else None
        ),
        speeds=speeds,
    )


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


def _open_home(options: Options) -> tuple[Store, str]:
    """The home folder (private), its store (migrated) and this instance's id."""
    home = options.home
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(home, 0o700)
    url = options.db or f"sqlite:///{home / 'hetsched.db'}"
    store = Store(url, sync=options.sync)
    store.migrate()
    instance_file = home / "instance"
    if not instance_file.exists():
        instance_file.write_text(secrets.token_hex(8))
    return store, instance_file.read_text().strip()


def _admin_token(store: Store, token_file: Path) -> str | None:
    """On the first start, an admin token, written to ``token_file`` (mode 0600)."""
    if store.has_admin_token():
        return None
    _token_id, token = store.create_token("admin", admin=True)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
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
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    built = build(options)
    executor = built.service.executor
    assert executor is not None
    if built.admin_token is not None:
        print(f"admin token written to {built.token_file} (mode 0600)", flush=True)
    else:
        print(f"admin token: see {built.token_file}", flush=True)
    if os.geteuid() == 0 and not options.run_as:
        log.warning("running as root without --run-as: jobs run as root")
    config = uvicorn.Config(
        built.app,
        host=options.host,
        port=options.port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        # the fastest of what is installed (httptools and uvloop when present)
        http="auto",
        loop="auto",
    )
    server = uvicorn.Server(config)
    if options.executor == "ray":
        loop = built.service.loop
        with loop.lock:
            names = ", ".join(sorted(node.name for node in loop.view.cluster.nodes)) or "none yet"
        print(f"tasks run on the Ray cluster at {options.ray_address}; nodes: {names}", flush=True)
    docs = "/docs" if options.docs_public else "/openapi.json with a token"
    print(
        f"hetsched up: http://{options.host}:{options.port} (API description at {docs}, "
        f"dashboard at /ui, Prometheus metrics at /metrics), home {options.home}",
        flush=True,
    )
    # uvicorn re-raises the signal it stopped for once it is done; these handlers make that
    # a no-op so the loop and the store close cleanly and the exit status is 0
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda _sig, _frame: None)
    _freeze_heap()
    try:
        server.run()
    finally:
        built.service.loop.stop()
        executor.shutdown()
        built.service.store.close()
    print("hetsched up: stopped; running tasks keep running and are adopted on restart")
    sys.stdout.flush()
