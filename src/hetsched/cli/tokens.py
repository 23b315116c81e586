"""``hetsched token create | revoke | list`` (admin)."""

from __future__ import annotations

from typing import Annotated

import typer

from hetsched.cli.client import call, get
from hetsched.cli.output import OutputFormat, console, print_json
from hetsched.cli.tables import Col, Grid, print_table

__all__ = ["token_app"]

token_app = typer.Typer(help="API tokens (admin only).", no_args_is_help=True)


@token_app.command("create")
def create(
    user: Annotated[
        str,
        typer.Option(
            help="The user the token acts as: 1-63 letters, digits, ., _ or -, the same rule as "
            "a job's user. A name an admin token was issued for takes admin tokens only."
        ),
    ],
    admin: Annotated[bool, typer.Option("--admin", help="Make it an admin token.")] = False,
    output: Annotated[
        OutputFormat, typer.Option("-o", "--output", help="table or json.")
    ] = OutputFormat.table,
) -> None:
    """Create a token; it is shown once and only its hash is stored."""
    data = call("POST", "/v1/tokens", json={"user": user, "admin": admin})
    if output is OutputFormat.json:
        print_json(data)
        return
    console.print(f"token {data['id']} for {data['user']}" + (" (admin)" if admin else ""))
    typer.echo(data["token"])


@token_app.command("revoke")
def revoke(token_id: Annotated[str, typer.Argument(help="Token id (from `token list`).")]) -> None:
    """Revoke a token at once."""
    call("DELETE", f"/v1/tokens/{token_id}")
    console.print(f"revoked {token_id}")


@token_app.command("list")
def list_tokens(
    output: Annotated[
        OutputFormat, typer.Option("-o", "--output", help="table or json.")
    ] = OutputFormat.table,
) -> None:
    """Tokens (ids, users, roles; never the secrets)."""
    rows = get("/v1/tokens")
    if output is OutputFormat.json:
        print_json(rows)
        return
    grid = Grid(f"Tokens ({len(rows)})", _COLUMNS)
    for r in rows:
        state = "revoked" if r["revoked_at"] else "live"
        grid.add(r["id"], r["owner"], "admin" if r["admin"] else "user", state)
    print_table(grid)


_COLUMNS = (Col("id", keep=True), Col("user", keep=True), Col("role"), Col("state", keep=True))
