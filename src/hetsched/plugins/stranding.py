"""stranding: keep accelerators fed; CPU-only work goes to CPU-only nodes.

Points: score. Args: ``typical`` (``class`` or ``class/model`` -> ``{cpu, memory}`` the
typical job of one such accelerator needs beside it; default: each node's proportional
share, see :mod:`hetsched.cluster.stranding`), ``cpu_only_penalty`` (0..100, default 60).

Score = 100 - 100 x (accelerators the placement would newly strand) / (the most
accelerators any node has) - ``cpu_only_penalty`` when a task without devices lands on a
node with accelerators, clipped to 0..100. A placement that strands nothing on a node
without accelerators, or a device task that strands nothing, scores 100 everywhere, so the
other scores decide alone.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from hetsched.cluster.stranding import (
    Typical,
    accelerators,
    node_needs,
    stranded_count,
    whole_free,
)
from hetsched.framework.cycle import CycleContext
from hetsched.framework.handle import SchedulerHandle
from hetsched.framework.interfaces import FloatArray, IntArray
from hetsched.framework.registry import register
from hetsched.model.device import SHARE_UNITS
from hetsched.model.quantity import QuantityError, parse_cpu, parse_memory

__all__ = ["Stranding", "StrandingArgs", "TypicalArgs", "profile_typicals"]

_TINY = 1e-9
#: up to this many rows are scored one by one in plain Python, more with numpy
_PYTHON_ROWS = 16


class TypicalArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    cpu: int = Field(default=0, ge=0)
    memory: int = Field(default=0, ge=0)

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu(cls, value: Any) -> int:
        try:
            return parse_cpu(value)
        except QuantityError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> int:
        try:
            return parse_memory(value)
        except QuantityError as exc:
            raise ValueError(str(exc)) from None


class StrandingArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    typical: dict[str, TypicalArgs] = Field(default_factory=dict)
    cpu_only_penalty: float = Field(default=60.0, ge=0, le=100)

    def typicals(self) -> dict[str, Typical]:
        return {k: Typical(v.cpu, v.memory) for k, v in self.typical.items()}


def profile_typicals(profile: Any) -> dict[str, Typical]:
    """The typical accelerator needs a profile's ``stranding`` score uses (none without
    one: then each node's proportional share), so measurements match what it optimizes."""
    for ref in getattr(profile, "score", ()):
        if ref.name == "stranding":
            return StrandingArgs.model_validate(ref.args).typicals()
    return {}


def _least_taken(request: Any) -> tuple[int, int]:
    """(whole devices the task takes wherever it lands, fractional requests): a request
    whose every alternative takes whole devices takes the fewest of their counts."""
    whole = shares = 0
    for device_request in request.devices:
        if all(c.share >= SHARE_UNITS for c in device_request.choices):
            whole += min(c.count for c in device_request.choices)
        elif all(c.count == 1 for c in device_request.choices):
            shares += 1
    return whole, shares


def _taken(ctx: CycleContext, rows: IntArray) -> IntArray:
    """Wholly free accelerators the task would take on each row: whole-device requests
    take their count; a share takes a whole device only where no started device of its
    class has room (the default device choice fills started devices first)."""
    taken = np.zeros(rows.size, np.int64)
    for request in ctx.request.devices:
        choice = request.primary
        if choice.share >= SHARE_UNITS:
            taken += choice.count
            continue
        mask = ctx.state.device_mask(choice.device_class, choice.selector)[rows]
        free = ctx.state.dev_free[rows]
        started = (mask & (free >= choice.share) & (free < SHARE_UNITS)).any(axis=1)
        taken += np.where(started, 0, 1)
    return taken


class _Headroom:
    """Per node row: CPU and memory beyond what its currently fed free accelerators need.

    A task that fits within both, plus the needs of the whole devices it takes, strands
    nothing new there (what is left feeds as many of the remaining free accelerators as
    were fed before), so only nodes whose headroom it exceeds are counted in full. Kept per
    row and recomputed only for the rows allocated on or released from since the last call
    (``ClusterState.changed_since``: every change of free capacity, by anyone, is an
    allocation or a release, or a topology change that bumps ``version`` and recomputes
    every row)."""

    def __init__(self) -> None:
        self._state: Any = None
        self._version = -1
        self._tick = -1
        self.cpu: FloatArray = np.zeros(0)
        self.mem: FloatArray = np.zeros(0)

    def sync(self, state: Any, need_cpu: FloatArray, need_mem: FloatArray) -> None:
        rows: IntArray | None = None
        if (
            state is self._state
            and state.version == self._version
            and self.cpu.shape == state.cpu_free.shape
        ):
            if state.tick == self._tick:
                return
            few = state.recent_changes(self._tick, _PYTHON_ROWS)
            if few is not None:  # the usual case: a plain list of a few rows, from the log
                self._tick = state.tick
                self._sync_rows(state, few, need_cpu, need_mem)
                return
            rows = state.changed_since(self._tick)
        self._state, self._version, self._tick = state, state.version, state.tick
        if rows is not None and rows.size <= _PYTHON_ROWS:
            self._sync_rows(state, rows.tolist(), need_cpu, need_mem)
            return
        pick = slice(None) if rows is None else rows
        cpu, mem, whole = state.cpu_free[pick], state.mem_free[pick], state.dev_whole_free[pick]
        fed = np.minimum(
            whole,
            np.minimum(np.maximum(cpu, 0) // need_cpu[pick], np.maximum(mem, 0) // need_mem[pick]),
        )
        if rows is None:
            self.cpu = cpu - fed * need_cpu
            self.mem = mem - fed * need_mem
        else:
            self.cpu[rows] = cpu - fed * need_cpu[rows]
            self.mem[rows] = mem - fed * need_mem[rows]

    def _sync_rows(
        self, state: Any, rows: list[int], need_cpu: FloatArray, need_mem: FloatArray
    ) -> None:
        """The update of :meth:`sync` for a few rows in plain Python: the same operations
        on the same doubles (Python's float ``//`` is numpy's), so the same bits."""
        cpu_free, mem_free, whole_free = state.cpu_free, state.mem_free, state.dev_whole_free
        for row in rows:
            cpu, mem = cpu_free.item(row), mem_free.item(row)
            nc, nm = need_cpu.item(row), need_mem.item(row)
            fed = min(float(whole_free.item(row)), min(max(cpu, 0) // nc, max(mem, 0) // nm))
            self.cpu[row] = cpu - fed * nc
            self.mem[row] = mem - fed * nm


@register("stranding", args=StrandingArgs)
class Stranding:
    """Fewest accelerators left without CPU or memory; CPU-only work off accelerator nodes."""

    name = "stranding"
    #: scores row by row, element by element (see Framework)
    row_local = True

    def __init__(
        self, args: BaseModel | None = None, handle: SchedulerHandle | None = None
    ) -> None:
        assert isinstance(args, StrandingArgs)
        self._typical = args.typicals()
        self._penalty = args.cpu_only_penalty
        self._headroom = _Headroom()
        self._typical_key = tuple(
            sorted((k, v.cpu_milli, v.memory_mib) for k, v in self._typical.items())
        )
        self._last_needs: tuple[Any, int, tuple[FloatArray, FloatArray]] | None = None
        #: request -> :func:`_least_taken` (requests are few and immutable)
        self._taken_by_request: dict[Any, tuple[int, int]] = {}

    def _needs(self, state: Any) -> tuple[FloatArray, FloatArray]:
        """Per row (CPU, memory) one accelerator needs, with 0 made a tiny positive need so
        the hot path divides without masking (a tiny need never limits). Kept in the
        state's memo (per topology version); the last state's pair is also kept here, as
        it is read at every score."""
        last = self._last_needs
        if last is not None and last[0] is state and last[1] == state.version:
            return last[2]

        def compute() -> tuple[FloatArray, FloatArray]:
            cpu, mem = node_needs(state, self._typical)
            return np.maximum(cpu, _TINY), np.maximum(mem, _TINY)

        needs: tuple[FloatArray, FloatArray] = state.memo(
            ("stranding_effective", self._typical_key), compute
        )
        self._last_needs = (state, state.version, needs)
        return needs

    def score(self, ctx: CycleContext, rows: IntArray) -> FloatArray:
        state = ctx.state
        last = self._last_needs
        if last is not None and last[0] is state and last[1] == state.version:
            need_cpu, need_mem = last[2]
        else:
            need_cpu, need_mem = self._needs(state)
        counts = accelerators(state)
        self._headroom.sync(state, need_cpu, need_mem)
        if rows.size <= _PYTHON_ROWS:
            # a cached request class rescores the few nodes placements changed since it was
            # last used: numpy's per-call cost on so few elements is most of the work
            taken = self._taken_by_request.get(ctx.request)
            if taken is None:
                taken = self._taken_by_request[ctx.request] = _least_taken(ctx.request)
            few = self._score_few(ctx, rows.tolist(), taken, counts, need_cpu, need_mem)
            return np.array(few, np.float64)
        return self._score_rows(ctx, rows, counts, need_cpu, need_mem)

    def _score_rows(
        self,
        ctx: CycleContext,
        rows: IntArray,
        counts: IntArray,
        need_cpu: FloatArray,
        need_mem: FloatArray,
    ) -> FloatArray:
        state = ctx.state
        request = ctx.request
        room_cpu, room_mem = self._headroom.cpu[rows], self._headroom.mem[rows]
        whole, shares = _least_taken(request)
        if whole or shares:
            # the devices it takes need no feeding any more: their share of CPU and memory
            # joins the headroom. A share takes a whole device at least where no device of
            # the node is started (free share = 1000 x whole free devices).
            taken = np.full(rows.size, whole, np.int64)
            if shares:
                unstarted = state.dev_free_total[rows] == SHARE_UNITS * state.dev_whole_free[rows]
                taken += shares * unstarted
            room_cpu = room_cpu + taken * need_cpu[rows]
            room_mem = room_mem + taken * need_mem[rows]
        hit = np.flatnonzero((room_cpu < request.cpu_milli) | (room_mem < request.memory_mib))
        score = np.full(rows.size, 100.0)
        if hit.size:
            sub = rows[hit]
            free = whole_free(state, sub)
            cpu, mem = state.cpu_free[sub], state.mem_free[sub]
            before = stranded_count(free, cpu, mem, need_cpu[sub], need_mem[sub])
            after = stranded_count(
                np.maximum(free - _taken(ctx, sub), 0),
                cpu - request.cpu_milli,
                mem - request.memory_mib,
                need_cpu[sub],
                need_mem[sub],
            )
            score[hit] -= 100.0 * np.maximum(after - before, 0) / _scale(state, counts)
        if not request.devices:
            score -= np.where(counts[rows] > 0, self._penalty, 0.0)
        return np.asarray(np.clip(score, 0.0, 100.0), np.float64)

    def _score_few(
        self,
        ctx: CycleContext,
        rows: list[int],
        least_taken: tuple[int, int],
        counts: IntArray,
        need_cpu: FloatArray,
        need_mem: FloatArray,
    ) -> list[float]:
        """:meth:`_score_rows` row by row, operation for operation in IEEE doubles (the
        same bits: numpy's float64 arithmetic and Python's float arithmetic are one)."""
        state = ctx.state
        request = ctx.request
        want_cpu, want_mem = request.cpu_milli, request.memory_mib
        room_cpus, room_mems = self._headroom.cpu, self._headroom.mem
        free_total, whole_free = state.dev_free_total, state.dev_whole_free
        whole, shares = least_taken
        penalized = not request.devices
        out: list[float] = []
        for row in rows:
            nc, nm = need_cpu.item(row), need_mem.item(row)
            room_cpu, room_mem = room_cpus.item(row), room_mems.item(row)
            if whole or shares:
                taken = whole
                if shares and free_total.item(row) == SHARE_UNITS * whole_free.item(row):
                    taken += shares
                room_cpu = room_cpu + taken * nc
                room_mem = room_mem + taken * nm
            score = 100.0
            if room_cpu < want_cpu or room_mem < want_mem:
                score -= self._stranded_delta(ctx, row, nc, nm, counts)
            if penalized and counts.item(row) > 0:
                score -= self._penalty
            out.append(min(max(score, 0.0), 100.0))
        return out

    @staticmethod
    def _stranded_delta(
        ctx: CycleContext, row: int, nc: float, nm: float, counts: IntArray
    ) -> float:
        """What placing on ``row`` takes off its score for the accelerators it strands."""
        state = ctx.state
        request = ctx.request
        free = state.dev_whole_free.item(row) * int(state.active.item(row))
        cpu, mem = state.cpu_free.item(row), state.mem_free.item(row)
        before = _stranded_row(free, cpu, mem, nc, nm)
        after = _stranded_row(
            max(free - int(_taken(ctx, np.array([row]))[0]), 0),
            cpu - request.cpu_milli,
            mem - request.memory_mib,
            nc,
            nm,
        )
        return 100.0 * max(after - before, 0) / _scale(state, counts)


def _scale(state: Any, counts: IntArray) -> int:
    """The most accelerators any node has (at least 1), per topology version."""
    return state.memo("stranding_scale", lambda: max(int(counts.max(initial=0)), 1))  # type: ignore[no-any-return]


def _stranded_row(free: int, cpu_free: int, mem_free: int, need_cpu: float, need_mem: float) -> int:
    """``stranded_count`` for one row whose needs are positive (``_needs``), with its
    arithmetic: floor of a true division, not floor division (the two can differ)."""
    usable = min(
        free,
        math.floor(max(cpu_free, 0) / need_cpu),
        math.floor(max(mem_free, 0) / need_mem),
    )
    return free - usable
