"""Which top-level packages of hetsched may import which (after kube-scheduler's
``.import-restrictions``).

The rule: the **core** (the scheduling brain, pure and synchronous) imports no driver; the
**drivers** (the bodies the brain runs in) import the core and the shared driver base
(``hetsched.drivers``: the action interpreter and the executor interface), and never each
other's internals, except where a row below says so and why. The command line imports
anything: it is where the pieces are put together.

Each row of :data:`ALLOWED` is one package, the packages it may import and the reason. An
edge is an import statement as :mod:`importgraph` reads it (function-level imports count,
``if TYPE_CHECKING:`` ones do not). :data:`KNOWN_VIOLATIONS` lists, module by module, the
imports that break a row today and are being taken out; the test fails when a new one
appears, and when a listed one is gone but still listed (so the set only shrinks).
"""

from __future__ import annotations

from typing import NamedTuple

from builders import ROOT
from importgraph import import_graph


class Row(NamedTuple):
    may_import: frozenset[str]
    reason: str


def _row(reason: str, *may_import: str) -> Row:
    return Row(frozenset(may_import), reason)


#: the shared lowest layers every package may use
_BASE = ("keys", "model")
#: the core, every package of it (a driver may import any)
CORE = frozenset(
    {"keys", "model", "rounds", "cluster", "framework", "plugins", "queueing", "scheduler"}
    | {"builtins"}
)
#: the core, the shared driver base and the TLS helpers: what any driver may import
_DRIVER_BASE = (*CORE, "drivers", "tls")

#: package -> what it may import besides itself. ``hetsched`` is the package's own
#: ``__init__`` (its version).
ALLOWED: dict[str, Row] = {
    # -- the core: layered, lowest first --------------------------------------------------
    "hetsched": _row("the version; imports nothing"),
    "keys": _row("typed keys of the shared state: a leaf"),
    "model": _row("devices, nodes, jobs, specs: a leaf"),
    "rounds": _row("round-based solvers (numpy and scipy only): a leaf library"),
    "cluster": _row("columnar state over the model", *_BASE),
    "framework": _row(
        "extension points and profiles: below the plugins; a profile's round policy is "
        "checked against the solvers",
        *_BASE,
        "cluster",
        "rounds",
    ),
    "plugins": _row("plugins are thin glue over the framework", *_BASE, "cluster", "framework"),
    "queueing": _row(
        "the queue and its orderings: the scheduler's usage books feed the fair-share orders",
        *_BASE,
        "cluster",
        "framework",
        "scheduler",
    ),
    "scheduler": _row(
        "the core loop: events in, actions out",
        *_BASE,
        "cluster",
        "framework",
        "queueing",
        "rounds",
    ),
    "builtins": _row(
        "the one list of built-in plugins and policies", "plugins", "queueing", "scheduler"
    ),
    "tls": _row("TLS contexts of servers and clients (the standard library's ssl): a leaf"),
    # -- the shared driver base ---------------------------------------------------------
    "drivers": _row(
        "the one action interpreter and executor interface: it reads the core's actions",
        *CORE,
    ),
    # -- the drivers --------------------------------------------------------------------
    "controlplane": _row(
        "API, store, turn loop, recovery, shared by service and federation; the agent's "
        "task-side protocols it serves (checkpoint and progress reports, the executor's "
        "task keys and device indices) and the interfaces of what it runs beside a process "
        "executor (the overcommit guard, the node watcher)",
        *_DRIVER_BASE,
        "agent",
    ),
    "agent": _row("device discovery, health watching and the process executor", *_DRIVER_BASE),
    "service": _row(
        "`hetsched up`: the control plane with the process executor, local or on Ray",
        *_DRIVER_BASE,
        "controlplane",
        "agent",
        "ray",
    ),
    "federation": _row(
        "the control plane with member clusters as nodes; a Kubernetes member speaks the "
        "k8s client (api, fencing, names, translate)",
        *_DRIVER_BASE,
        "controlplane",
        "k8s",
    ),
    "k8s": _row(
        "device plugin, DRA driver, scheduler, extender; the node's devices come from the "
        "agent's discovery and health watching",
        *_DRIVER_BASE,
        "agent",
    ),
    "ray": _row("the process executor inside a Ray actor on each node", *_DRIVER_BASE, "agent"),
    "sim": _row("the simulation engine and its experiments", *_DRIVER_BASE),
    "cli": _row("the command: puts the pieces together", "*"),
}

#: (importing module, imported module) pairs that break :data:`ALLOWED` today and are
#: being taken out. None is left: the federation runs on the control plane's public API,
#: and the exit type is the executor protocol's.
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()


def top(module: str) -> str:
    """``hetsched.service.loop`` -> ``service``; the package itself -> ``hetsched``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def violations(graph: dict[str, set[str]], allowed: dict[str, Row]) -> set[tuple[str, str]]:
    """Every (module, imported module) whose packages the table does not allow; a package
    without a row may import nothing outside itself."""
    out: set[tuple[str, str]] = set()
    for module, imported in graph.items():
        source = top(module)
        row = allowed.get(source, Row(frozenset(), ""))
        for target in imported:
            package = top(target)
            if package != source and "*" not in row.may_import and package not in row.may_import:
                out.add((module, target))
    return out


def test_the_core_imports_no_driver() -> None:
    drivers = set(ALLOWED) - CORE - {"hetsched"}
    for package in CORE:
        assert not ALLOWED[package].may_import & drivers, package


def test_every_package_has_a_row_with_a_reason() -> None:
    packages = {top(m) for m in import_graph(ROOT / "src")}
    # controlplane may not exist yet: a row ahead of its package is fine
    assert packages - set(ALLOWED) == set()
    assert all(row.reason for row in ALLOWED.values())


def test_the_rule_finds_a_sibling_import_and_allows_the_core() -> None:
    graph = {
        "hetsched.sim.engine": {"hetsched.scheduler.core", "hetsched.drivers"},
        "hetsched.sim.report": {"hetsched.k8s.api"},
        "hetsched.cli.main": {"hetsched.service.server"},
        "hetsched.model.job": {"hetsched.cli.main"},
    }
    assert violations(graph, ALLOWED) == {
        ("hetsched.sim.report", "hetsched.k8s.api"),
        ("hetsched.model.job", "hetsched.cli.main"),
    }


def test_packages_import_only_what_their_row_allows() -> None:
    found = violations(import_graph(ROOT / "src"), ALLOWED)
    new = found - KNOWN_VIOLATIONS
    assert new == set(), f"imports against ALLOWED: {sorted(new)}"
    gone = KNOWN_VIOLATIONS - found
    assert gone == set(), f"gone: remove from KNOWN_VIOLATIONS: {sorted(gone)}"
