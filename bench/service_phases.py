"""Run ``hetsched up`` with a timestamp at each step of a submission's way to its task's
start, for ``bench/service_latency.py --phases``. Not part of the product: it wraps a few of
the service's methods by name (those present in the checkout it runs), so it also times an
older checkout given with ``--compare-src``.

    python bench/service_phases.py TRACE_FILE up --home ... (the arguments of hetsched up)

Each line of TRACE_FILE is ``kind field...``:

- ``commit JOB ADMITTED BEGIN END GROUP``: the submission's group commit (the API admitted the
  job at ADMITTED, its row's ``submitted_at``; the transaction holding it ran from BEGIN to
  END, with GROUP submissions in it);
- ``queued JOB T``: the API handed the committed job to the loop;
- ``started JOB TURN PLAN0 PLAN1 RECORD0 RECORD1 SPAWN0 STARTED``: the loop's turn that
  started the job's task began at TURN, planned from PLAN0 to PLAN1, committed its record
  from RECORD0 to RECORD1, spawned from SPAWN0, and the task's start time is STARTED;
- ``gc START SECONDS GENERATION THREAD``: a garbage collection that took over 0.5 ms.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any

_MIN_GC_S = 0.0005


def _install(out: Any) -> None:
    from hetsched.controlplane import launcher, loop
    from hetsched.controlplane.storage import store

    try:  # the group-commit writer's own module, in checkouts that have it
        from hetsched.controlplane.storage import groupcommit
    except ImportError:
        groupcommit = None

    guard = threading.Lock()
    turn: dict[str, float] = {}

    def emit(*fields: object) -> None:
        with guard:
            out.write(" ".join(map(str, fields)) + "\n")

    def wrap(owner: Any, name: str, around: Any) -> None:
        inner = getattr(owner, name, None)
        if inner is not None:
            setattr(owner, name, lambda *a, **k: around(inner, *a, **k))

    def commit(inner: Any, self: Any, batch: list[Any]) -> Any:
        began = time.time()
        result = inner(self, batch)
        ended = time.time()
        for item in batch:
            row = item.row
            emit("commit", row["id"], row["submitted_at"], began, ended, len(batch))
        return result

    def submitted(inner: Any, self: Any, row: dict[str, Any], *rest: Any, **kw: Any) -> Any:
        emit("queued", row["id"], time.time())
        return inner(self, row, *rest, **kw)

    def timed(before: str, after: str) -> Any:
        def around(inner: Any, *args: Any, **kw: Any) -> Any:
            turn[before] = time.time()
            result = inner(*args, **kw)
            turn[after] = time.time()
            return result

        return around

    def launch(inner: Any, self: Any, starts: Any) -> Any:
        turn["spawn0"] = time.time()
        launched, failed = inner(self, starts)
        steps = ("turn", "plan0", "plan1", "record0", "record1", "spawn0")
        for task in launched:
            emit("started", task.key.job, *(turn.get(s, 0.0) for s in steps), task.at)
        return launched, failed

    wrap(store.Store, "_commit_submissions", commit)
    if groupcommit is not None:
        wrap(groupcommit.GroupCommit, "_commit_submissions", commit)
    wrap(loop.ControlLoop, "submitted", submitted)
    wrap(loop.ControlLoop, "turn", timed("turn", "turn1"))
    wrap(loop.ControlLoop, "_plan", timed("plan0", "plan1"))
    wrap(store.Store, "record_turn", timed("record0", "record1"))
    wrap(launcher.Launcher, "launch", launch)

    began: dict[int, tuple[float, float]] = {}

    def collected(phase: str, info: dict[str, Any]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            began[ident] = (time.perf_counter(), time.time())
            return
        start = began.pop(ident, None)
        if start is not None and time.perf_counter() - start[0] > _MIN_GC_S:
            took = time.perf_counter() - start[0]
            emit("gc", start[1], took, info["generation"], threading.current_thread().name)

    gc.callbacks.append(collected)


def main() -> None:
    trace, argv = sys.argv[1], sys.argv[2:]
    out = open(trace, "a", buffering=1)  # noqa: SIM115 (open while the service runs)
    _install(out)
    from hetsched.cli.main import main as hetsched

    sys.argv = ["hetsched", *argv]
    hetsched()


if __name__ == "__main__":
    main()
