"""Binding off the scheduling loop: the same decisions as binding on it, with the bindings
carried out concurrently over kept-alive connections."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

from hetsched.k8s.api import ApiError, KubeClusterAPI, for_host
from hetsched.k8s.binding import Binder, BindJob, Member
from hetsched.k8s.names import ASSIGNED_DEVICES, POD_GROUP, POD_GROUP_MIN
from hetsched.k8s.podevents import PodEvents
from hetsched.k8s.scheduler import PodScheduler
from hetsched.keys import TaskKey
from k8s.apiserver import ApiServer, gpus, node_json, pod_json

Obj = dict[str, Any]


def workload(server: ApiServer) -> None:
    """Nodes of mixed sizes and models and 60 pods of mixed shapes, one gang among them;
    a few never fit. Put in the store before the scheduler starts, so every decision is
    taken in its first batch."""
    store = server.store
    for i in range(12):
        model = "H100" if i % 3 == 0 else "A100"
        devices = gpus(f"n{i}", 2 + i % 3, model)
        store.put("nodes", node_json(f"n{i}", cpu=str(8 + 4 * (i % 2)), devices=devices))
    for i in range(50):
        shape = i % 5
        if shape == 0:
            body = pod_json(f"p{i}", devices={"gpu": 1})
        elif shape == 1:
            body = pod_json(f"p{i}", devices={"gpu": 2}, cpu="2")
        elif shape == 2:
            annotations = {"hetsched.io/share": str(100 * (1 + i % 7))}
            body = pod_json(f"p{i}", devices={"gpu-shared": 1}, annotations=annotations)
        elif shape == 3:
            selector = {"hetsched.io/selector": 'device.attributes["model"] == "H100"'}
            body = pod_json(f"p{i}", devices={"gpu": 1}, annotations=selector)
        else:
            body = pod_json(f"p{i}", cpu="3")
        store.put("pods", body)
    for i in range(4):
        group = {"labels": {POD_GROUP: "g"}, "annotations": {POD_GROUP_MIN: "4"}}
        store.put("pods", pod_json(f"g{i}", devices={"gpu": 1}, **group))
    for i in range(6):
        store.put("pods", pod_json(f"big{i}", devices={"gpu": 16}))


def bindings(server: ApiServer) -> dict[str, tuple[str, list[Obj]]]:
    out = {}
    for obj in server.store.items("pods", "default"):
        node = obj["spec"].get("nodeName")
        if node:
            raw = obj["metadata"].get("annotations", {}).get(ASSIGNED_DEVICES) or "[]"
            out[obj["metadata"]["name"]] = (str(node), json.loads(raw))
    return out


def schedule(workers: int) -> tuple[dict[str, tuple[str, list[Obj]]], int]:
    server = ApiServer().start()
    try:
        workload(server)
        api = for_host(server.url)
        sched = PodScheduler(api, watch_timeout_s=2, bind_workers=workers)
        sched.sync()
        sched.start_watches()
        try:
            quiet = 0
            for _ in range(400):  # until nothing happens for 10 steps in a row
                count = len(server.store.bindings)
                sched.step(0.05)
                busy = sched.binder.in_flight or len(server.store.bindings) != count
                quiet = 0 if busy else quiet + 1
                if quiet >= 10:
                    break
        finally:
            sched.stop()
            api.close()
        return bindings(server), server.connections
    finally:
        server.stop()


def test_concurrent_binding_makes_the_same_decisions_as_binding_on_the_loop() -> None:
    inline, _ = schedule(0)
    concurrent, _ = schedule(8)
    # most fit (the gang whole or not at all); the six big ones never do
    assert 30 <= len(inline) <= 54
    assert all(f"g{i}" in inline for i in range(4)) or not any(f"g{i}" in inline for i in range(4))
    assert not any(f"big{i}" in inline for i in range(6))
    assert concurrent == inline


def test_bindings_run_concurrently_and_reuse_their_connections(server: ApiServer) -> None:
    """Eight jobs bound by four workers against a double that holds each Binding until
    four are in flight at once: they overlap, and use no more connections than workers."""
    api = for_host(server.url)
    for i in range(8):
        server.store.put("pods", pod_json(f"p{i}"))
    server.store.put("nodes", node_json("a"))
    gate = threading.Barrier(4, timeout=10)
    in_flight = {"now": 0, "most": 0}
    lock = threading.Lock()

    class Slow:
        def __getattr__(self, name: str) -> Any:
            return getattr(api, name)

        def bind(self, *args: Any, **kwargs: Any) -> bool:
            with lock:
                in_flight["now"] += 1
                in_flight["most"] = max(in_flight["most"], in_flight["now"])
            with contextlib.suppress(threading.BrokenBarrierError):
                gate.wait()
            try:
                return api.bind(*args, **kwargs)
            finally:
                with lock:
                    in_flight["now"] -= 1

    woken = threading.Event()
    binder = Binder(Slow(), PodEvents(api, "hetsched", "test"), workers=4, wake=woken.set)
    before = server.connections
    for i in range(8):
        obj = server.store.get("pods", "default", f"p{i}")
        assert obj is not None
        member = Member(f"default/p{i}", TaskKey(f"j{i}", 0, 1), obj, "a")
        binder.submit(BindJob(f"j{i}", 1, (member,)))
    binder.close()
    outcomes = binder.take()
    assert woken.is_set()
    assert sorted(o.job.job_id for o in outcomes) == [f"j{i}" for i in range(8)]
    assert all(o.complete for o in outcomes)
    assert in_flight["most"] == 4
    # one connection per worker at most (bindings and Scheduled events share them)
    assert server.connections - before <= 4
    assert binder.in_flight == {}


def test_a_worker_that_fails_unexpectedly_still_answers(server: ApiServer) -> None:
    api = for_host(server.url)

    class Broken:
        def __getattr__(self, name: str) -> Any:
            return getattr(api, name)

        def bind(self, *args: Any, **kwargs: Any) -> bool:
            raise RuntimeError("boom")

    server.store.put("pods", pod_json("p"))
    obj = server.store.get("pods", "default", "p")
    assert obj is not None
    binder = Binder(Broken(), PodEvents(api, "hetsched", "test"), workers=2)
    binder.submit(BindJob("j", 1, (Member("default/p", TaskKey("j", 0, 1), obj, "a"),)))
    binder.close()
    (outcome,) = binder.take()
    assert not outcome.complete and "boom" in outcome.error


def test_an_api_error_ends_the_job_binding_at_the_failed_member(server: ApiServer) -> None:
    api = for_host(server.url)
    calls: list[str] = []

    class Refusing:
        def __getattr__(self, name: str) -> Any:
            return getattr(api, name)

        def bind(self, namespace: str, name: str, *args: Any, **kwargs: Any) -> bool:
            calls.append(name)
            if name == "p1":
                raise ApiError(503, "unavailable")
            return api.bind(namespace, name, *args, **kwargs)

    server.store.put("nodes", node_json("a"))
    members = []
    for i in range(3):
        server.store.put("pods", pod_json(f"p{i}"))
        obj = server.store.get("pods", "default", f"p{i}")
        assert obj is not None
        members.append(Member(f"default/p{i}", TaskKey("j", i, 1), obj, "a"))
    binder = Binder(Refusing(), PodEvents(api, "hetsched", "test"), workers=0)
    binder.submit(BindJob("j", 1, tuple(members)))
    (outcome,) = binder.take()
    assert calls == ["p0", "p1"]  # p2 is never tried
    assert [m.key for m in outcome.bound] == ["default/p0"]
    assert outcome.failed is not None and outcome.failed.key == "default/p1"
    assert (outcome.conflict, outcome.error) == (False, "503: unavailable")


def test_the_client_keeps_enough_connections_for_the_workers() -> None:
    api: KubeClusterAPI = for_host("http://127.0.0.1:1", pool_size=40)
    assert api.api_client.configuration.connection_pool_maxsize == 40


def test_queued_events_are_written_off_the_caller_and_dropped_past_the_queue() -> None:
    """With a queue, an Event write returns at once; past ``queue_size`` waiting writes a
    new one is dropped and counted; close() lets the queued ones be written, and later
    writes are carried out by their caller."""
    release = threading.Event()
    written: list[str] = []

    class Blocking:
        def create_event(self, namespace: str, event: Obj) -> None:
            release.wait(10)
            written.append(str(event["reason"]))

    events = PodEvents(Blocking(), "hetsched", "test", queue_size=2)  # type: ignore[arg-type]
    pod = pod_json("p")
    events.post(pod, "Normal", "first", "taken by the thread, which blocks")
    for _ in range(100):  # until the thread holds the first write
        if events._queue is not None and events._queue.qsize() == 0:
            break
        threading.Event().wait(0.01)
    events.post(pod, "Normal", "second", "queued")
    events.post(pod, "Normal", "third", "queued")
    events.post(pod, "Normal", "fourth", "dropped: two are waiting already")
    assert events.dropped == 1
    assert written == []  # nothing was written on the caller's thread
    release.set()
    events.close()
    events.post(pod, "Normal", "fifth", "after close: on the caller's thread")
    assert "fifth" in written  # written before post() returned
    for _ in range(500):
        if len(written) == 4:
            break
        threading.Event().wait(0.01)
    assert sorted(written) == ["fifth", "first", "second", "third"]
