"""The federation's plugins on a core whose nodes are members (no processes)."""

from __future__ import annotations

import dataclasses

import pytest

from builders import gpu_node, job
from hetsched.cluster import ClusterState
from hetsched.federation.jobs import MEMBER_LABEL, as_one_task
from hetsched.federation.plugins import STATE_LABEL, Book, federation_plugins, start_score
from hetsched.federation.server import default_profile
from hetsched.framework.profile import parse_profile
from hetsched.framework.registry import installed
from hetsched.model.speed import JobSpeed
from hetsched.model.topology import TopologyRequest
from hetsched.scheduler import Bind, JobSubmitted, NodeChanged, Pending, Scheduler

MODELS = {"a": "A100", "b": "V100", "c": "T4"}


def _core(book: Book) -> Scheduler:
    registry = installed().with_plugins(*federation_plugins(book))
    profile = parse_profile(default_profile(), registry=registry)
    nodes = []
    for name, model in MODELS.items():
        inner = gpu_node(f"{name}-node", gpus=2 if name != "b" else 4, model=model)
        book.inventories[name] = (inner,)
        member = dataclasses.replace(
            inner,
            name=name,
            devices=tuple(dataclasses.replace(d, id=f"{name}~1/{d.id}") for d in inner.devices),
            labels={MEMBER_LABEL: name, STATE_LABEL: "ready"},
        )
        nodes.append(member)
    return Scheduler(ClusterState(nodes), profile, registry=registry)


def _place(core: Scheduler, book: Book, submitted: object, now: float = 0.0) -> str | None:
    assert isinstance(submitted, type(job("x")))
    book.jobs[submitted.id] = submitted
    actions = core.handle([JobSubmitted(as_one_task(submitted))], now)
    binds = [a for a in actions if isinstance(a, Bind)]
    return binds[0].placements[0][1].node if binds else None


def test_speed_picks_the_fastest_free_model_then_the_next() -> None:
    book = Book()
    core = _core(book)
    fast = JobSpeed({"A100": 3.0, "V100": 1.0, "T4": 0.5})
    placed = [
        _place(core, book, dataclasses.replace(job(f"f{i}", gpus=1), speed=fast)) for i in range(4)
    ]
    assert placed == ["a", "a", "b", "b"]


def test_a_member_no_node_of_which_could_hold_the_job_is_passed_over_by_name() -> None:
    book = Book()
    core = _core(book)
    # two tasks of 2 GPUs: only b (4 GPUs on one node) could ever hold both
    assert _place(core, book, job("g", gpus=2, replicas=2)) == "b"
    waiting = job("h", gpus=3)
    book.jobs["h"] = waiting
    actions = core.handle([JobSubmitted(as_one_task(waiting))], 1.0)
    [pending] = [a for a in actions if isinstance(a, Pending)]
    reasons = [r.reason for r in pending.explanation.rejections]
    assert [r.split(":")[0] for r in reasons if "could ever hold" in r] == ["member a", "member c"]
    assert any(r.startswith("insufficient free gpu") for r in reasons), reasons


def test_members_not_ready_take_no_new_job_and_say_why() -> None:
    book = Book()
    core = _core(book)
    core.handle(
        [
            NodeChanged("a", labels={MEMBER_LABEL: "a", STATE_LABEL: "unreachable"}),
            NodeChanged("b", labels={MEMBER_LABEL: "b", STATE_LABEL: "lapsed"}),
            NodeChanged("c", labels={MEMBER_LABEL: "c", STATE_LABEL: "unreachable"}),
        ],
        0.0,
    )
    waiting = job("w", gpus=1)
    book.jobs["w"] = waiting
    actions = core.handle([JobSubmitted(as_one_task(waiting))], 1.0)
    [pending] = [a for a in actions if isinstance(a, Pending)]
    reasons = {r.reason for r in pending.explanation.rejections}
    assert {"member a: unreachable", "member b: lapsed", "member c: unreachable"} <= reasons
    core.handle([NodeChanged("c", labels={MEMBER_LABEL: "c", STATE_LABEL: "ready"})], 2.0)
    assert core.view.job("w") is not None and core.view.job("w").placements[0].node == "c"


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        (None, 50.0),
        ({"fits_now": True, "start_in_s": 0}, 100.0),
        ({"fits_now": False, "start_in_s": 300.0}, 50.0),
        ({"fits_now": False, "start_in_s": 900.0}, 0.0),
        ({"fits_now": False, "start_in_s": None}, 0.0),
    ],
)
def test_start_scores(answer: dict[str, object] | None, score: float) -> None:
    assert start_score(answer, 600.0) == score


def test_the_member_that_says_it_starts_the_job_now_wins() -> None:
    book = Book()
    core = _core(book)
    probe = job("p", gpus=1)
    from hetsched.federation.plugins import shape

    # b and c would have to wait (work the federation does not see); a starts it now
    book.whatif = {
        "a": {shape(probe): {"fits_now": True, "start_in_s": 0}},
        "b": {shape(probe): {"fits_now": False, "start_in_s": 500}},
        "c": {shape(probe): {"fits_now": False, "start_in_s": None}},
    }
    assert _place(core, book, probe) == "a"


def test_one_task_holds_every_replica() -> None:
    whole = as_one_task(job("x", gpus=2, replicas=3, gang=2))
    assert whole.replicas == 1 and whole.gang is None
    assert whole.resources.cpu_milli == 3000
    assert [(d.primary.count, d.primary.share) for d in whole.resources.devices] == [(6, 1000)]
    shared = as_one_task(job("y", gpus=1, share=300, replicas=2))
    assert [(d.primary.count, d.primary.share) for d in shared.resources.devices] == [
        (1, 300),
        (1, 300),
    ]


def test_a_job_asking_for_network_domains_goes_to_a_member_whole() -> None:
    # the member places it inside its domains (its spec carries the request there); the
    # federation, whose nodes are members, has no levels and places it as one task
    book = Book()
    core = _core(book)
    rack = TopologyRequest(required="net/rack", slice_size=2, slice_required="net/nvl")
    sliced = job("s", gpus=1, replicas=2, topology=rack)
    assert as_one_task(sliced).topology is None
    assert _place(core, book, sliced) is not None
    alone = job("t", gpus=1, topology=TopologyRequest(preferred="net/rack"))
    assert _place(core, book, alone) is not None
