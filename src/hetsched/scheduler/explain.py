"""Why a job is pending: per filter, how many nodes it rejected and why, and what would fit.

Explanations are computed only for jobs that failed to place, and read the same state
the attempt saw.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field

from hetsched.framework.cycle import CycleContext
from hetsched.framework.runtime import Framework, NodeRejections
from hetsched.framework.status import Code, Status
from hetsched.model.device import SHARE_UNITS
from hetsched.model.job import DeviceChoice, DeviceRequest, TaskRequest

__all__ = ["Explanation", "explain_placement", "relaxations"]


@dataclass(frozen=True, slots=True)
class Explanation:
    """A structured pending reason.

    ``code`` is UNRESOLVABLE when no node could hold the task even empty, UNSCHEDULABLE
    when it could but not now. ``reasons`` are job-level (queue, gang, quota) reasons;
    ``rejections`` the per-node filter counts; ``suggestions`` what would fit now.

    ``position`` is (queue, 1-based position among the waiting jobs of that queue, in the
    order of the last cycle that tried the job). It is left out of equality: a job whose
    place in line moved has not got a new reason, so no new Pending action is emitted.
    """

    code: Code
    summary: str
    reasons: tuple[str, ...] = ()
    rejections: tuple[NodeRejections, ...] = ()
    suggestions: tuple[str, ...] = ()
    position: tuple[str, int] | None = field(default=None, compare=False)

    def lines(self) -> list[str]:
        out = [self.summary]
        if self.position is not None:
            out.append(f"position {self.position[1]} in queue {self.position[0]}")
        out += self.reasons
        out += [f"- {r}" for r in self.rejections]
        out += [f"would fit now: {s}" for s in self.suggestions]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code.value,
            "summary": self.summary,
            "reasons": list(self.reasons),
            "rejections": [
                {"plugin": r.plugin, "reason": r.reason, "nodes": r.nodes} for r in self.rejections
            ],
            "suggestions": list(self.suggestions),
            "position": (
                None
                if self.position is None
                else {"queue": self.position[0], "index": self.position[1]}
            ),
        }


def _with_device(request: TaskRequest, index: int, choice: DeviceChoice) -> TaskRequest:
    devices = list(request.devices)
    devices[index] = DeviceRequest((choice,))
    return dataclasses.replace(request, devices=tuple(devices))


@functools.lru_cache(maxsize=4096)
def _relaxed(request: TaskRequest) -> tuple[tuple[str, TaskRequest], ...]:
    """:func:`relaxations` of a request, built once (a cluster sees few distinct requests,
    and every failed attempt explains itself)."""
    return tuple(relaxations(request))


def relaxations(request: TaskRequest) -> Iterator[tuple[str, TaskRequest]]:
    """Smaller variants of a request, each with how to say it: fewer devices, no selector,
    a smaller share. Tried in order; the first that fits is the most useful hint."""
    for index, device_request in enumerate(request.devices):
        choice = device_request.primary
        if choice.selector:
            yield (
                f"without the selector on {choice.device_class}",
                _with_device(request, index, dataclasses.replace(choice, selector=None)),
            )
        for count in range(choice.count - 1, 0, -1):
            yield (
                f"{count} {choice.device_class} instead of {choice.count}",
                _with_device(request, index, dataclasses.replace(choice, count=count)),
            )
        if choice.count == 1:
            for share in (750, 500, 250, 100):
                if share < choice.share:
                    yield (
                        f"a {share}/{SHARE_UNITS} share of {choice.device_class} instead of "
                        f"{min(choice.share, SHARE_UNITS)}",
                        _with_device(request, index, dataclasses.replace(choice, share=share)),
                    )


def explain_placement(
    framework: Framework,
    ctx: CycleContext,
    placed: int = 0,
    needed: int = 1,
    status: Status | None = None,
) -> Explanation:
    """Explain why a task of ``ctx.job`` did not place (``placed`` of ``needed`` did).
    ``status`` is the PreFilter's verdict on ``ctx`` when the caller has it already."""
    if status is None:
        status = framework.prefilter(ctx)
    rejections = tuple(framework.diagnose(ctx))
    total = int(ctx.state.active.sum())
    if status.code is Code.UNRESOLVABLE:
        summary = str(status)
        code = Code.UNRESOLVABLE
    else:
        code = Code.UNSCHEDULABLE
        summary = f"no node fits a task now (0 of {total} node{'s' if total != 1 else ''})"
        if needed > 1:
            summary = (
                f"only {placed} of the {needed} tasks it needs at once fit now "
                f"(gang of {needed}); no node fits the next one"
            )
    suggestions: list[str] = []
    for text, relaxed in _relaxed(ctx.request):
        trial = CycleContext(ctx.state, ctx.job, relaxed, ctx.now)
        if framework.feasible(trial).any():
            suggestions.append(text)
            break
    return Explanation(code, summary, (), rejections, tuple(suggestions))
