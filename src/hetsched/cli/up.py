"""``hetsched up``: the control plane and a local agent, in one process."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hetsched.cli.output import fail
from hetsched.framework.profile import ProfileError
from hetsched.model.specs import SpecError

__all__ = ["up"]


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
) -> None:
    """Start the control plane (API, store, reconcile loop) and a local agent."""
    # imported here so the other commands start without the server's dependencies
    from hetsched.service.recovery import RecoveryError
    from hetsched.service.server import Options, default_home, serve

    mapping: dict[str, str] = {}
    for item in run_as or []:
        user, sep, account = item.partition("=")
        if not sep or not user or not account:
            fail(f"--run-as expects USER=OSUSER, got {item!r}")
        mapping[user] = account
    if sync.upper() not in {"FULL", "NORMAL"}:
        fail("--sync must be FULL or NORMAL")
    backends = [b.strip() for b in backend.split(",") if b.strip()] if backend else None
    if backends is not None:
        from hetsched.agent.backends import backend_names

        unknown = [b for b in backends if b not in backend_names()]
        if unknown:
            fail(f"--backend: unknown {unknown[0]!r} (known: {', '.join(backend_names())})")
    options = Options(
        home=home or default_home(),
        host=host,
        port=port,
        db=db,
        profile=profile,
        queues=queues,
        cluster=list(cluster or []),
        fake_devices=fake_devices,
        node_name=node_name,
        device_backends=backends,
        sysfs_root=sysfs_root,
        watch_interval_s=watch_interval,
        demo=demo,
        run_as=mapping,
        rate_limit=rate_limit,
        kill_grace_s=kill_grace,
        sync=sync.upper(),
        metrics_public=metrics_public,
        docs_public=public_docs,
    )
    try:
        serve(options)
    except (SpecError, ProfileError) as exc:
        fail(str(exc), 2)
    except RecoveryError as exc:
        fail(f"hetsched up: {exc}", 1)
