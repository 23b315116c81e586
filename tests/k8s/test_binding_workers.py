"""The binding workers' hand-off to the scheduling thread, and the raw POST's request path."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hetsched.k8s.api import _base_path
from hetsched.k8s.binding import Binder, BindJob, Member
from hetsched.k8s.podevents import PodEvents
from hetsched.keys import TaskKey


class _Api:
    """Binds every pod; ``gate`` holds the workers until set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.bound: list[str] = []

    def bind(self, namespace: str, name: str, *args: Any, **kwargs: Any) -> bool:
        self.gate.wait(10)
        self.bound.append(name)
        return True

    def create_event(self, namespace: str, event: Any) -> None:
        pass


def _binder(api: Any, workers: int, wake: Any = lambda: None) -> Binder:
    return Binder(api, PodEvents(api, "hetsched", "test"), workers, wake)


def _job(i: int) -> BindJob:
    obj = {"metadata": {"namespace": "default", "name": f"p{i}", "uid": f"u{i}"}}
    return BindJob(f"j{i}", 1, (Member(f"default/p{i}", TaskKey(f"j{i}", 0, 1), obj, "a"),))


def test_the_loop_is_woken_once_per_batch_of_outcomes_it_has_not_taken() -> None:
    api, wakes = _Api(), list[int]()
    binder = _binder(api, 0, lambda: wakes.append(1))
    binder.submit(_job(0))
    binder.submit(_job(1))
    assert len(wakes) == 1  # the second outcome joins the first, not taken yet
    assert [o.job.job_id for o in binder.take()] == ["j0", "j1"]
    binder.submit(_job(2))
    assert len(wakes) == 2
    assert [o.job.job_id for o in binder.take()] == ["j2"]
    assert binder.in_flight == {}


def test_close_waits_for_the_workers_bindings_and_a_later_submit_starts_new_ones() -> None:
    api = _Api()
    api.gate.clear()
    binder = _binder(api, 3)
    for i in range(5):
        binder.submit(_job(i))
    assert binder.take() == []  # all held at the gate
    api.gate.set()
    binder.close()
    assert sorted(o.job.job_id for o in binder.take()) == ["j0", "j1", "j2", "j3", "j4"]
    binder.submit(_job(5))
    binder.close()
    assert [o.job.job_id for o in binder.take()] == ["j5"]
    assert sorted(api.bound) == ["p0", "p1", "p2", "p3", "p4", "p5"]


@pytest.mark.parametrize(
    ("host", "base"),
    [
        ("http://127.0.0.1:8080", ""),
        ("https://k8s.example:6443/prefix/api", "/prefix/api"),
        ("https://k8s.example:6443/", None),  # host + path gives "//api/...": left to urllib3
        ("https://k8s.example?x=1", None),
        ("https://k8s.example/a b", None),
        ("https://k8s.example/a/../b", None),
    ],
)
def test_the_raw_posts_path_is_the_servers_path_then_the_apis(host: str, base: str | None) -> None:
    assert _base_path(host) == base
