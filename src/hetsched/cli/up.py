"""``hetsched up``: the control plane and its executor (local agent or Ray), in one process."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hetsched.cli.output import fail
from hetsched.framework.profile import ProfileError
from hetsched.model.specs import SpecError

if TYPE_CHECKING:
    from hetsched.service.options import Options

__all__ = ["ExecutorKind", "topology_levels", "up"]


class ExecutorKind(StrEnum):
    """Where tasks run."""

    local = "local"
    ray = "ray"


#: the options of ``up``
_UpHome = Annotated[Path | None, typer.Option(help="State directory.")]
_UpHost = Annotated[str, typer.Option(help="Address to listen on.")]
_UpPort = Annotated[int, typer.Option(help="Port to listen on.")]
_UpDb = Annotated[
    str | None, typer.Option(help="Store URL, e.g. postgresql+psycopg://u:p@host/db.")
]
_UpProfile = Annotated[Path | None, typer.Option(help="Scheduling profile YAML.")]
_UpQueues = Annotated[Path | None, typer.Option(help="Queues YAML (users, quotas).")]
_UpCluster = Annotated[
    list[Path] | None, typer.Option(help="Add simulated nodes from a cluster YAML.")
]
_UpFakeDevices = Annotated[
    Path | None, typer.Option(help="Devices of this node from a YAML (fake backend).")
]
_UpNodeName = Annotated[str | None, typer.Option(help="Name of this node.")]
_UpBackend = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="Discovery backends for this node, comma-separated: cpu, nvidia, pci, fake "
        "(default: cpu, plus fake with --fake-devices).",
    ),
]
_UpSysfsRoot = Annotated[Path, typer.Option(help="Where sysfs is.")]
_UpWatchInterval = Annotated[
    float, typer.Option(help="Seconds between looks for hot-plug and health changes.")
]
_UpDemo = Annotated[
    bool, typer.Option("--demo", help="Add the demo's simulated heterogeneous nodes.")
]
_UpRunAs = Annotated[
    list[str] | None,
    typer.Option(help="USER=OSUSER: run USER's jobs as OSUSER (service as root only)."),
]
_UpRateLimit = Annotated[float, typer.Option(help="Requests per second per token (0: no limit).")]
_UpKillGrace = Annotated[float, typer.Option(help="Seconds between SIGTERM and SIGKILL.")]
_UpSync = Annotated[str, typer.Option(help="SQLite synchronous mode: FULL or NORMAL.")]
_UpMetricsPublic = Annotated[
    bool,
    typer.Option(
        "--metrics-public", help="Serve /metrics without a token (it needs one by default)."
    ),
]
_UpPublicDocs = Annotated[
    bool,
    typer.Option(
        "--public-docs",
        help="Serve the API description (/openapi.json, /docs, /redoc) without a token "
        "(it needs one by default).",
    ),
]

_UpAcceptEmpty = Annotated[
    bool,
    typer.Option(
        "--accept-empty-store",
        help="Start even though the store fails the check at start (empty, truncated, or "
        "its write-ahead log lost while the home shows earlier use): what it lost stays "
        "lost. Restoring a backup (hetsched store restore) is the other way out.",
    ),
]

_UpMaxLogSize = Annotated[
    str | None,
    typer.Option(
        help="Keep each running task's stdout and stderr under this size, e.g. 64Mi: past "
        "it the oldest half is dropped, and the log says so (default: no cap).",
    ),
]

_UpTopologyLevel = Annotated[
    list[str] | None,
    typer.Option(
        "--topology-level",
        help="A network level: a node label, broadest first, once per level (e.g. "
        "network.hetsched.io/block, then network.hetsched.io/rack); jobs ask for one with "
        "topology: {required|preferred: LABEL}. Default: the levels of the first --cluster "
        "file that declares them.",
    ),
]
_UpNodeLabel = Annotated[
    list[str] | None,
    typer.Option(
        "--node-label",
        help="KEY=VALUE: a label of this machine's node, once per label (its rack under "
        "--topology-level network.hetsched.io/rack, say).",
    ),
]

_UpExecutor = Annotated[
    ExecutorKind,
    typer.Option(
        help="Where tasks run: local (processes on this machine, with its devices) or ray "
        "(the nodes of the Ray cluster at --ray-address; see docs/ray.md).",
    ),
]
_UpRayAddress = Annotated[
    str | None,
    typer.Option(
        help="HOST:PORT of the Ray head's GCS (what `ray start --head` and "
        "`hetsched ray local` print), with --executor ray.",
    ),
]
_UpRayTimeout = Annotated[
    float,
    typer.Option(
        min=0,
        help="Seconds to wait at start for each Ray node's first device discovery "
        "(nodes that answer later join as they do).",
    ),
]

_UpTlsCert = Annotated[
    Path | None,
    typer.Option(help="Serve HTTPS with this certificate chain (PEM); needs --tls-key."),
]
_UpTlsKey = Annotated[Path | None, typer.Option(help="The key of --tls-cert (PEM, unencrypted).")]
_UpTlsClientCa = Annotated[
    Path | None,
    typer.Option(
        help="Require every client to present a certificate signed by this CA bundle (PEM): "
        "federations, agents, the CLI (--client-cert).",
    ),
]
_UpAdvertiseUrl = Annotated[
    str | None,
    typer.Option(
        help="The API's URL as tasks reach it (HETSCHED_API; default: this host and port, "
        "https with --tls-cert).",
    ),
]
_UpAdvertiseCa = Annotated[
    Path | None,
    typer.Option(
        help="CA bundle (PEM) tasks verify the https API with; its text is given to them "
        "in HETSCHED_CA_PEM, so no file need be on their machine.",
    ),
]

_UpLease = Annotated[
    str | None,
    typer.Option(
        help="Run as one of a standby pair: lead under this lease in the --db PostgreSQL, or "
        "wait as a standby (serving reads, redirecting the rest to the leader) and take over "
        "when the leader's lease expires. Both processes share the home.",
    ),
]
_UpLeaseS = Annotated[
    float,
    typer.Option(
        "--lease-s",
        min=2.0,
        max=300.0,
        help="Seconds a lease runs without renewal; a standby takes over after it.",
    ),
]

#: options of ``up`` whose name and value are those of :class:`Options`' field
_SAME_NAMES = (
    *("host", "port", "db", "profile", "queues", "fake_devices", "node_name", "sysfs_root"),
    *("demo", "rate_limit", "metrics_public", "ray_address"),
    *("tls_cert", "tls_key", "tls_client_ca", "advertise_url", "advertise_ca"),
    *("lease", "lease_s"),
)


def up(
    home: _UpHome = None,
    host: _UpHost = "127.0.0.1",
    port: _UpPort = 8780,
    db: _UpDb = None,
    profile: _UpProfile = None,
    queues: _UpQueues = None,
    cluster: _UpCluster = None,
    fake_devices: _UpFakeDevices = None,
    node_name: _UpNodeName = None,
    backend: _UpBackend = None,
    sysfs_root: _UpSysfsRoot = Path("/sys"),
    watch_interval: _UpWatchInterval = 2.0,
    demo: _UpDemo = False,
    run_as: _UpRunAs = None,
    rate_limit: _UpRateLimit = 200.0,
    kill_grace: _UpKillGrace = 5.0,
    sync: _UpSync = "FULL",
    metrics_public: _UpMetricsPublic = False,
    public_docs: _UpPublicDocs = False,
    executor: _UpExecutor = ExecutorKind.local,
    ray_address: _UpRayAddress = None,
    ray_timeout: _UpRayTimeout = 60.0,
    tls_cert: _UpTlsCert = None,
    tls_key: _UpTlsKey = None,
    tls_client_ca: _UpTlsClientCa = None,
    advertise_url: _UpAdvertiseUrl = None,
    advertise_ca: _UpAdvertiseCa = None,
    lease: _UpLease = None,
    lease_s: _UpLeaseS = 8.0,
    accept_empty_store: _UpAcceptEmpty = False,
    max_log_size: _UpMaxLogSize = None,
    topology_level: _UpTopologyLevel = None,
    node_label: _UpNodeLabel = None,
) -> None:
    """Start the control plane (API, store, reconcile loop) and run tasks on this machine,
    or on a Ray cluster with --executor ray."""
    # imported here so the other commands start without the server's dependencies
    from hetsched.service.server import Options, default_home

    given = locals()
    options = Options(
        **{name: given[name] for name in _SAME_NAMES},
        home=home or default_home(),
        cluster=list(cluster or []),
        device_backends=_backends(backend),
        watch_interval_s=watch_interval,
        run_as=_run_as(run_as),
        kill_grace_s=kill_grace,
        sync=_sync_mode(sync),
        docs_public=public_docs,
        executor=executor.value,
        ray_timeout_s=ray_timeout,
        accept_empty_store=accept_empty_store,
        max_log_bytes=_log_bytes(max_log_size),
        **_topology(topology_level, node_label),
    )
    _check_executor(options)
    _check_fake_devices(options.fake_devices)
    _serve(options)


def _check_fake_devices(path: Path | None) -> None:
    """Refuse to start with a device file that is missing or invalid: the node would come
    up with none of its devices. (Once running, a bad edit keeps the last good answer and
    is logged once per change.)"""
    if path is None:
        return
    from hetsched.agent.discovery import load_fake_devices

    try:
        load_fake_devices(path)
    except SpecError as exc:
        fail(f"--fake-devices: {exc}", 2)


def _serve(options: Options) -> None:
    """Run the service; what it refuses to start with becomes the command's error."""
    from hetsched.controlplane import RecoveryError
    from hetsched.service.server import serve

    try:
        if options.lease is not None:
            from hetsched.service.pair import serve_pair

            serve_pair(options)
        else:
            serve(options)
    except (SpecError, ProfileError) as exc:
        fail(str(exc), 2)
    except RecoveryError as exc:
        fail(f"hetsched up: {exc}", 1)
    except SystemExit as exc:
        # what the service refuses to start with says why in its message
        if isinstance(exc.code, str):
            fail(exc.code, 2)
        raise


def _sync_mode(sync: str) -> str:
    if sync.upper() not in {"FULL", "NORMAL"}:
        fail("--sync must be FULL or NORMAL")
    return sync.upper()


def _log_bytes(size: str | None) -> int | None:
    if size is None:
        return None
    from hetsched.model.quantity import parse_memory

    try:
        mib = parse_memory(size)
    except (ValueError, ArithmeticError):
        fail(f"--max-log-size: expected a size such as 64Mi or 1Gi, got {size!r}", 2)
    if mib < 1:
        fail(f"--max-log-size: at least 1Mi, got {size!r}", 2)
    return mib << 20


def _run_as(run_as: list[str] | None) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in run_as or []:
        user, sep, account = item.partition("=")
        if not sep or not user or not account:
            fail(f"--run-as expects USER=OSUSER, got {item!r}")
        mapping[user] = account
    return mapping


def _topology(levels: list[str] | None, labels: list[str] | None) -> dict[str, Any]:
    """:class:`Options`' ``topology_levels`` and ``node_labels``, checked."""
    return {"topology_levels": topology_levels(levels), "node_labels": _node_labels(labels)}


def topology_levels(levels: list[str] | None) -> tuple[str, ...]:
    """``--topology-level`` (of ``up`` and ``k8s scheduler``) checked as a cluster file's
    ``topology: {levels}`` is."""
    from hetsched.model.topology_spec import levels_problem

    problem = levels_problem(levels or [])
    if problem is not None:
        fail(f"--topology-level: {problem}", 2)
    return tuple(levels or ())


def _node_labels(labels: list[str] | None) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in labels or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            fail(f"--node-label expects KEY=VALUE, got {item!r}", 2)
        mapping[key] = value
    return mapping


def _backends(backend: str | None) -> list[str] | None:
    backends = [b.strip() for b in backend.split(",") if b.strip()] if backend else None
    if backends is not None:
        from hetsched.agent.backends import backend_names

        unknown = [b for b in backends if b not in backend_names()]
        if unknown:
            fail(f"--backend: unknown {unknown[0]!r} (known: {', '.join(backend_names())})")
    return backends


def _check_executor(options: Options) -> None:
    """Refuse, before anything starts, an executor the other options do not fit."""
    from hetsched.service.engines import check_executor

    try:
        check_executor(options)
    except SystemExit as exc:
        fail(str(exc), 2)
    if options.ray_address is not None:
        from hetsched.ray.service import parse_address

        try:
            parse_address(options.ray_address)
        except ValueError as exc:
            fail(str(exc), 2)
