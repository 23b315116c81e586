"""``hetsched federation``: one queue in front of several clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hetsched.cli.output import fail
from hetsched.framework.profile import ProfileError
from hetsched.model.specs import SpecError
from hetsched.model.speed import SpeedError

__all__ = ["federation_app"]

federation_app = typer.Typer(
    help="One queue, one set of quotas and fair shares in front of several clusters "
    "(hetsched up, Kubernetes), with failover that never runs a job twice at once.",
    no_args_is_help=True,
)


@federation_app.command("up")
def up(
    members: Annotated[
        Path,
        typer.Option(
            help="members.yaml: the federation's name, its lease, and its members "
            "(docs/federation.md)."
        ),
    ],
    home: Annotated[Path | None, typer.Option(help="State directory.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8790,
    db: Annotated[
        str | None, typer.Option(help="Store URL, e.g. postgresql+psycopg://u:p@host/db.")
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            help="Scheduling profile YAML (queues, quotas, fair share, speeds); the member "
            "filters are added when it leaves them out."
        ),
    ] = None,
    queues: Annotated[Path | None, typer.Option(help="Queues YAML (users, quotas).")] = None,
    rate_limit: Annotated[
        float, typer.Option(help="Requests per second per token (0: no limit).")
    ] = 200.0,
    sync: Annotated[str, typer.Option(help="SQLite synchronous mode: FULL or NORMAL.")] = "FULL",
    renew_every: Annotated[
        float | None,
        typer.Option(help="Seconds between lease renewals at each member (default: lease/5)."),
    ] = None,
    metrics_public: Annotated[
        bool, typer.Option("--metrics-public", help="Serve /metrics without a token.")
    ] = False,
    public_docs: Annotated[
        bool,
        typer.Option("--public-docs", help="Serve the API description without a token."),
    ] = False,
) -> None:
    """Start a federation: the same API as `hetsched up` (submit, jobs, why, cancel, logs),
    jobs placed on member clusters by capacity, speed, quota and labels, and moved to
    another member only once the first has surely stopped them."""
    from hetsched.controlplane import default_home
    from hetsched.federation.server import FederationOptions, serve

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
    )
    try:
        serve(options)
    except (SpecError, ProfileError, SpeedError) as exc:
        fail(str(exc), 2)


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
