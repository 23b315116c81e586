"""``hetsched federation``: one queue in front of several clusters."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hetsched.cli.output import fail
from hetsched.framework.profile import ProfileError
from hetsched.model.specs import SpecError
from hetsched.model.speed import SpeedError

if TYPE_CHECKING:
    from hetsched.federation.server import FederationOptions

__all__ = ["federation_app"]

federation_app = typer.Typer(
    help="One queue, one set of quotas and fair shares in front of several clusters "
    "(hetsched up, Kubernetes), with failover that never runs a job twice at once.",
    no_args_is_help=True,
)


_Members = Annotated[
    Path,
    typer.Option(
        help="members.yaml: the federation's name, its lease, and its members (docs/federation.md)."
    ),
]
_Db = Annotated[str | None, typer.Option(help="Store URL, e.g. postgresql+psycopg://u:p@host/db.")]
_Profile = Annotated[
    Path | None,
    typer.Option(
        help="Scheduling profile YAML (queues, quotas, fair share, speeds); the member "
        "filters are added when it leaves them out."
    ),
]
_RateLimit = Annotated[float, typer.Option(help="Requests per second per token (0: no limit).")]
_RenewEvery = Annotated[
    float | None,
    typer.Option(help="Seconds between lease renewals at each member (default: lease/5)."),
]
_MetricsPublic = Annotated[
    bool, typer.Option("--metrics-public", help="Serve /metrics without a token.")
]
_PublicDocs = Annotated[
    bool, typer.Option("--public-docs", help="Serve the API description without a token.")
]


_TlsCert = Annotated[
    Path | None,
    typer.Option(help="Serve HTTPS with this certificate chain (PEM); needs --tls-key."),
]
_TlsKey = Annotated[Path | None, typer.Option(help="The key of --tls-cert (PEM, unencrypted).")]
_TlsClientCa = Annotated[
    Path | None,
    typer.Option(help="Require every client to present a certificate signed by this CA (PEM)."),
]


_Lease = Annotated[
    str | None,
    typer.Option(
        help="Run as one of a standby pair: lead under this lease in the --db PostgreSQL, or "
        "wait as a standby and take over when the leader's lease expires (both share the home).",
    ),
]
_LeaseS = Annotated[
    float,
    typer.Option("--lease-s", min=2.0, max=300.0, help="Seconds a lease runs without renewal."),
]
_AdvertiseUrl = Annotated[
    str | None,
    typer.Option(help="This process's URL as the other of a pair redirects to."),
]


@federation_app.command("up")
def up(
    members: _Members,
    home: Annotated[Path | None, typer.Option(help="State directory.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8790,
    db: _Db = None,
    profile: _Profile = None,
    queues: Annotated[Path | None, typer.Option(help="Queues YAML (users, quotas).")] = None,
    rate_limit: _RateLimit = 200.0,
    sync: Annotated[str, typer.Option(help="SQLite synchronous mode: FULL or NORMAL.")] = "FULL",
    renew_every: _RenewEvery = None,
    metrics_public: _MetricsPublic = False,
    public_docs: _PublicDocs = False,
    tls_cert: _TlsCert = None,
    tls_key: _TlsKey = None,
    tls_client_ca: _TlsClientCa = None,
    lease: _Lease = None,
    lease_s: _LeaseS = 8.0,
    advertise_url: _AdvertiseUrl = None,
) -> None:
    """Start a federation: the same API as `hetsched up` (submit, jobs, why, cancel, logs),
    jobs placed on member clusters by capacity, speed, quota and labels, and moved to
    another member only once the first has surely stopped them."""
    from hetsched.controlplane import default_home
    from hetsched.federation.server import FederationOptions

    if sync.upper() not in {"FULL", "NORMAL"}:
        fail("--sync must be FULL or NORMAL")
    if renew_every is not None and renew_every <= 0:
        fail("--renew-every must be a positive number of seconds")
    options = FederationOptions(
        members=members,
        home=home or default_home() / "federation",
        host=host,
        port=port,
        db=db,
        profile=profile,
        queues=queues,
        rate_limit=rate_limit,
        sync=sync.upper(),
        metrics_public=metrics_public,
        docs_public=public_docs,
        renew_every_s=renew_every,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_client_ca=tls_client_ca,
        lease=lease,
        lease_s=lease_s,
        advertise_url=advertise_url,
    )
    _run(options)


def _run(options: FederationOptions) -> None:
    """Serve (one of a standby pair with a lease); what it refuses to start with becomes
    the command's one-line error."""
    from hetsched.federation.server import serve

    try:
        if options.lease is not None:
            from hetsched.federation.pair import serve_pair

            serve_pair(options)
        else:
            serve(options)
    except (SpecError, ProfileError, SpeedError) as exc:
        fail(str(exc), 2)
    except SystemExit as exc:
        if isinstance(exc.code, str):  # what it refuses to start with, in one line
            fail(exc.code, 2)
        raise


@federation_app.command("check")
def check(
    members: Annotated[Path, typer.Argument(help="members.yaml to check.")],
) -> None:
    """Check a members file: every problem with its field path, or a one-line summary."""
    from hetsched.federation.spec import load_members

    try:
        spec = load_members(members)
    except SpecError as exc:
        fail(str(exc), 2)
    names = ", ".join(f"{m.name} ({m.kind})" for m in spec.members)
    typer.echo(f"federation {spec.federation}: lease {spec.lease:g}s, members {names}")
