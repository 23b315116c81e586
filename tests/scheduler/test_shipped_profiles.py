"""Every shipped profile keeps what the default profile has, and the demo shows the project
at its best.

A profile under examples/profiles/ enables, at every extension point, at least the plugins
the default profile (examples/profiles/default.yaml, the same as ``parse_profile({})``)
enables there, unless it says why not in a comment of its own::

    # without: stranding - the reason, in words

``queue_sort`` is exempt: it holds one plugin, which each profile chooses. A ``without``
line must name a plugin the profile really leaves out, with a reason: a stale one fails too.

The demo (``hetsched up --demo``: examples/clusters/demo.yaml, examples/profiles/demo.yaml,
examples/workloads/demo.yaml) places every task of its workload in one pass with no
accelerator stranded, and its later urgent job preempts the low-priority batch job.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builders import EXAMPLES
from hetsched.cluster import ClusterState
from hetsched.cluster.stranding import stranded_accelerators
from hetsched.framework.profile import ProfileSpec, load_profile, parse_profile
from hetsched.framework.speeds import load_speed_table
from hetsched.model.job import Job
from hetsched.model.specs import load_cluster, parse_jobs
from hetsched.model.yamlio import safe_load
from hetsched.plugins.stranding import profile_typicals
from hetsched.scheduler import Bind, JobSubmitted, Preempt, Scheduler

PROFILES = sorted((Path(EXAMPLES) / "profiles").glob("*.yaml"))
#: the extension points whose plugins add up (queue_sort holds one, chosen per profile)
POINTS = ("prefilter", "filter", "score", "reserve", "permit", "post_filter", "bind")
_WITHOUT = re.compile(r"^#\s*without:\s*(?P<name>[\w-]+)\s+[-\u2014]+\s+(?P<reason>\S.*)$")


def _names(spec: ProfileSpec, point: str) -> set[str]:
    return {ref.name for ref in getattr(spec, point)}


def _declared_without(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = _WITHOUT.match(line.strip())
        if match:
            found[match["name"]] = match["reason"]
    return found


def test_the_shipped_default_profile_is_the_built_in_default() -> None:
    shipped = load_profile(Path(EXAMPLES) / "profiles" / "default.yaml")
    built_in = parse_profile({})
    assert shipped.queue_sort.name == built_in.queue_sort.name
    for point in POINTS:
        assert [r.name for r in getattr(shipped, point)] == [
            r.name for r in getattr(built_in, point)
        ], point


@pytest.mark.parametrize("path", PROFILES, ids=[p.name for p in PROFILES])
def test_every_shipped_profile_keeps_the_defaults_or_says_why_not(path: Path) -> None:
    default = parse_profile({})
    spec = load_profile(path)
    declared = _declared_without(path)
    missing = {name for point in POINTS for name in _names(default, point) - _names(spec, point)}
    undeclared = missing - set(declared)
    assert not undeclared, (
        f"{path.name} leaves out {sorted(undeclared)} of the default profile: enable them, or "
        "say why not in a line '# without: NAME - reason'"
    )
    stale = set(declared) - missing
    assert not stale, f"{path.name}: '# without' names {sorted(stale)}, which it enables"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# without: stranding - round mode places whole GPUs itself\n", {"stranding"}),
        ("# without: node-selector \u2014 no labels in this cluster\n", {"node-selector"}),
        ("# without: stranding\n", set()),  # no reason: not a declaration
        ("# stranding is off\n", set()),
    ],
)
def test_a_without_line_needs_a_name_and_a_reason(
    tmp_path: Path, text: str, expected: set[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text + "name: p\n")
    assert set(_declared_without(path)) == expected


#: what the service runs, not what placement reads (``check``/``place`` ignore them)
_SERVICE_ONLY = ("command", "workdir", "env")


def _demo_jobs(key: str) -> list[Job]:
    document = safe_load((Path(EXAMPLES) / "workloads" / "demo.yaml").read_bytes())
    bodies = [{k: v for k, v in job.items() if k not in _SERVICE_ONLY} for job in document[key]]
    return parse_jobs({"jobs": bodies})


def _demo_core() -> tuple[Scheduler, ClusterState, ProfileSpec]:
    state = ClusterState(load_cluster(Path(EXAMPLES) / "clusters" / "demo.yaml"))
    spec = load_profile(Path(EXAMPLES) / "profiles" / "demo.yaml")
    core = Scheduler(state, spec)
    core.speed_table = load_speed_table(spec.speeds)
    return core, state, spec


def test_the_demo_places_every_task_at_once_and_strands_nothing() -> None:
    core, state, spec = _demo_core()
    jobs = _demo_jobs("jobs")
    actions = core.handle([JobSubmitted(job) for job in jobs], now=0.0)
    nodes = {
        a.job_id: sorted({p.node for _, p in a.placements}) for a in actions if isinstance(a, Bind)
    }
    assert set(nodes) == {job.id for job in jobs}
    report = stranded_accelerators(state, profile_typicals(spec))
    assert report.stranded == 0, report
    # CPU-only work on the CPU-only nodes; the speed job on its fastest free model
    for name in ("etl-0", "etl-1", "etl-2"):
        assert all(node.startswith("demo-cpu-") for node in nodes[name]), nodes
    assert nodes["train-speed"] == ["demo-v100-0"]
    assert nodes["finetune-t4"][0].startswith("demo-t4-")
    urgent = _demo_jobs("later")
    later = core.handle([JobSubmitted(job) for job in urgent], now=10.0)
    preempted = [a for a in later if isinstance(a, Preempt)]
    assert [a.job_id for a in preempted] == ["batch-embed"]
    assert preempted[0].preemptor == "urgent-train"
