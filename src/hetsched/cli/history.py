"""``hetsched history export``: the real history of ``hetsched up``, for a replay.

The history is read from the store directly, not through the API: the store is the source
of truth (the API pages through jobs and shows no node changes), it can be read while the
service is down, and reading it takes nothing from a running service but one read
transaction. Replay it with ``hetsched sim replay --history FILE``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hetsched.cli.output import OutputFormat, console, fail, print_json
from hetsched.cli.store import StoreDb, StoreHome

if TYPE_CHECKING:
    from hetsched.controlplane.storage.store import Store
    from hetsched.model.history import HistoryDocument

__all__ = ["history_app"]

history_app = typer.Typer(
    help="The real history of hetsched up (jobs, their runs, the nodes), for a replay.",
    no_args_is_help=True,
)

_Output = Annotated[OutputFormat, typer.Option("-o", "--output", help="table or json.")]
_Pods = Annotated[
    Path | None,
    typer.Option(
        help="Instead of the store: the Kubernetes scheduler's pods, as `kubectl get pods -A "
        "-o json` wrote them (with --kubectl-nodes)."
    ),
]
_Nodes = Annotated[
    Path | None, typer.Option(help="With --kubectl-pods: `kubectl get nodes -o json`'s output.")
]
_SchedulerName = Annotated[
    str, typer.Option(help="With --kubectl-pods: the scheduler whose pods to take.")
]


def _open(home: Path | None, db: str | None) -> Store:
    """The store of ``home`` (or at ``db``), as it is: never created, never migrated."""
    from sqlalchemy import inspect

    from hetsched.controlplane import default_home
    from hetsched.controlplane.storage.store import Store

    if db is None:
        database = (home or default_home()) / "hetsched.db"
        if not database.is_file():
            fail(f"--home: no store at {database} (the home of a hetsched up run?)", 2)
        db = f"sqlite:///{database}"
    try:
        store = Store(db)
        with store.read() as conn:
            tables = set(inspect(conn).get_table_names())
    except Exception as exc:  # the driver's own errors: a bad URL, a server down
        fail(f"--db: cannot read the store: {exc}", 2)
    if "jobs" not in tables:
        store.close()
        fail("the store has no hetsched schema (start hetsched up on it once)", 2)
    if "nodes" not in tables:
        store.close()
        fail(
            "the store keeps no node records yet: start this hetsched's `hetsched up` on it "
            "once (it upgrades the store and records its nodes), then export",
            2,
        )
    return store


def _from_store(home: Path | None, db: str | None) -> HistoryDocument:
    from hetsched.controlplane.history import export_history

    store = _open(home, db)
    try:
        return export_history(store)
    finally:
        store.close()


def _from_kubectl(pods: Path | None, nodes: Path | None, scheduler: str) -> HistoryDocument:
    """The Kubernetes scheduler's history from kubectl's JSON; exits naming a bad file."""
    import time

    from hetsched.k8s.history import history_from_kubectl, items_of
    from hetsched.k8s.podrequest import TranslateError

    if pods is None or nodes is None:
        fail("--kubectl-pods and --kubectl-nodes go together", 2)
    read: list[list[Any]] = []
    for flag, path in (("--kubectl-pods", pods), ("--kubectl-nodes", nodes)):
        try:
            read.append(items_of(json.loads(path.read_text(encoding="utf-8")), str(path)))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, TranslateError) as exc:
            fail(f"{flag}: {path}: {exc}", 2)
    try:
        return history_from_kubectl(
            read[0], read[1], scheduler, time.time(), f"kubernetes ({pods})"
        )
    except (TranslateError, KeyError, TypeError, ValueError) as exc:
        fail(f"--kubectl-pods: {exc}", 2)


@history_app.command("export")
def export(
    target: Annotated[
        Path, typer.Argument(help="The history file to write (JSON; '-': standard output).")
    ],
    home: StoreHome = None,
    db: StoreDb = None,
    kubectl_pods: _Pods = None,
    kubectl_nodes: _Nodes = None,
    scheduler_name: _SchedulerName = "hetsched",
    output: _Output = OutputFormat.table,
) -> None:
    """Write the history of hetsched up: every job (its submission without the command,
    its submit time, its runs with node, devices, start and end, how it ended), the
    nodes it ran on (with when they joined and left), and the profile and seed the
    service started with. Read from the store, so it works while the service is down.

    Replay it with `hetsched sim replay --history FILE`: under the recorded profile the
    replay places the jobs as the service did; under another profile it shows what
    would have changed.

    With --kubectl-pods and --kubectl-nodes, the history of the Kubernetes scheduler instead,
    from what kubectl shows of its pods and the nodes (it keeps no store of its own).
    """
    if kubectl_pods is not None or kubectl_nodes is not None:
        document = _from_kubectl(kubectl_pods, kubectl_nodes, scheduler_name)
    else:
        document = _from_store(home, db)
    text = json.dumps(document.model_dump(mode="json"), indent=1) + "\n"
    if str(target) == "-":
        typer.echo(text, nl=False)
        return
    from hetsched.controlplane import write_durably

    try:
        write_durably(target, text, mode=0o644)
    except OSError as exc:
        fail(f"{target}: cannot write: {exc.strerror}", 1)
    summary = {"path": str(target), "jobs": len(document.jobs), "nodes": len(document.nodes)}
    if output is OutputFormat.json:
        print_json(summary)
    else:
        console.print(
            f"wrote {summary['jobs']} jobs and {summary['nodes']} nodes to {target}; "
            f"replay: hetsched sim replay --history {target}",
            highlight=False,
        )
