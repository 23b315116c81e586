import pytest

from hetsched.model.lifecycle import (
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    JobState,
    check_transition,
)


@pytest.mark.parametrize(("source", "target"), sorted(TRANSITIONS, key=str))
def test_allowed_transitions_pass(source: JobState | None, target: JobState) -> None:
    check_transition("j", source, target)


@pytest.mark.parametrize("terminal", sorted(TERMINAL))
@pytest.mark.parametrize("target", list(JobState))
def test_terminal_states_are_final(terminal: JobState, target: JobState) -> None:
    with pytest.raises(InvalidTransition):
        check_transition("j", terminal, target)


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (None, JobState.RUNNING),
        (JobState.PENDING, JobState.SUCCEEDED),
        (JobState.PENDING, JobState.FAILED),
        (JobState.RUNNING, JobState.REJECTED),
    ],
)
def test_forbidden_transitions_raise(source: JobState | None, target: JobState) -> None:
    with pytest.raises(InvalidTransition, match="not allowed"):
        check_transition("j", source, target)
