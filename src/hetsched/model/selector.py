"""Device selectors: CEL expressions in Kubernetes DRA syntax.

``device.attributes["model"] in ["A100", "H100"] && device.attributes["memory_gib"] >= 40``

A device's attributes are seen by name; one named ``<domain>/<name>`` is also seen as
``device.attributes["<domain>"].<name>``, and the attribute :data:`DRIVER` as
``device.driver``, as a DRA DeviceClass or ResourceClaim selector reads a device
(``device.driver == "hetsched.io" && device.attributes["hetsched.io"].model == "H100"``).

Expressions are compiled once and evaluated once per distinct device attribute set; a
cluster has few device models, so a selector costs a handful of evaluations however many
nodes there are. An expression that fails at run time on a device (a missing attribute,
a type mismatch) does not match that device, as in DRA.

Cost is bounded twice (see :mod:`hetsched.model.selector_limits`): :func:`compile_selector`,
the one function every loader, the API and the Kubernetes translation compile through,
refuses a selector over the static limits before it ever runs; and :func:`matches` evaluates
under a budget of steps, so no selector can take more than that on one device whatever the
estimate missed. The budget counts steps, not seconds: the result does not depend on the
machine or its load.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from hetsched.model.device import AttrValue
from hetsched.model.selector_limits import (
    LIMITS,
    SelectorLimitError,
    SelectorLimits,
    SelectorShapeError,
    check_text,
    check_tree,
)

if TYPE_CHECKING:  # celpy and lark are imported with the first selector, not with the model
    from lark import Token, Tree

__all__ = [
    "DRIVER",
    "LIMITS",
    "AttrKey",
    "Selector",
    "SelectorError",
    "SelectorLimits",
    "SelectorTooCostly",
    "attr_key",
    "compile_selector",
    "matches",
    "set_parser_source",
    "warm",
]

AttrKey = tuple[tuple[str, AttrValue], ...]

#: the attribute a selector sees as ``device.driver`` (DRA devices carry it); no DRA
#: attribute name can be spelled so
DRIVER = "@driver"


def _device(attributes: Mapping[str, AttrValue]) -> dict[str, Any]:
    """What a selector sees as ``device`` (see the module docstring)."""
    seen: dict[str, Any] = dict(attributes)
    for key, value in attributes.items():
        domain, slash, name = key.rpartition("/")
        if slash and domain:
            nested = seen.setdefault(domain, {})
            if isinstance(nested, dict):
                nested[name] = value
    device: dict[str, Any] = {"attributes": seen}
    driver = attributes.get(DRIVER)
    if driver is not None:
        device["driver"] = driver
    return device


def _build_parser_as_celpy_does() -> None:
    pass


#: called once before celpy's environment is built: a driver may install the parser from
#: a cache there (see :func:`set_parser_source`); the core itself reads no file
_parser_source: Callable[[], None] = _build_parser_as_celpy_does


def set_parser_source(source: Callable[[], None]) -> None:
    """Have ``source`` put celpy's parser in place (``celpy.CELParser.CEL_PARSER``) before
    the first selector is compiled; it must leave the parser unset when it cannot, and
    then celpy builds it."""
    global _parser_source
    _parser_source = source


@cache
def _env() -> Any:
    """celpy's environment, built on first use: building its parser costs a noticeable part
    of a short command's run, and most commands never compile a selector."""
    import celpy

    _parser_source()
    return celpy.Environment()


class SelectorError(ValueError):
    """A selector that is not valid CEL, or that the limits refuse."""


class SelectorTooCostly(SelectorError):
    """A selector over one of :class:`SelectorLimits`; ``limit`` names the limit it broke."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class _OverBudget(Exception):
    """An evaluation that used up its budget of steps."""


class _Budget:
    __slots__ = ("left",)

    def __init__(self, steps: int) -> None:
        self.left = steps


@cache
def _evaluator() -> Any:
    """The evaluator class (celpy's, with a budget), made on first use."""
    from celpy.evaluation import Evaluator

    class _BudgetedEvaluator(Evaluator):
        """celpy's tree-walking evaluator, charging one step per node visited;
        comprehension bodies run in sub-evaluators that share the budget."""

        def __init__(self, ast: Tree[Token], activation: Any, budget: _Budget) -> None:
            super().__init__(ast, activation)
            self._budget = budget

        def sub_evaluator(self, ast: Tree[Token]) -> _BudgetedEvaluator:
            return _BudgetedEvaluator(ast, self.activation, self._budget)

        def _visit_tree(self, tree: Tree[Token]) -> Any:
            budget = self._budget
            budget.left -= 1
            if budget.left < 0:
                raise _OverBudget
            return super()._visit_tree(tree)

    return _BudgetedEvaluator


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector within the limits."""

    expression: str
    #: estimated worst-case steps of one evaluation
    cost: int
    _ast: Tree[Token]
    _runner: Any

    def evaluate(self, attributes: Mapping[str, AttrValue], budget: int) -> bool:
        """Whether a device with ``attributes`` matches; False on any run-time error and
        when the evaluation takes more than ``budget`` steps."""
        return self._run(attributes, budget)[0]

    def steps(self, attributes: Mapping[str, AttrValue]) -> int:
        """The steps one evaluation on ``attributes`` takes, with no budget (for tests of the
        estimate: it never exceeds :attr:`cost`)."""
        return self._run(attributes, 1 << 62)[1]

    def _run(self, attributes: Mapping[str, AttrValue], budget: int) -> tuple[bool, int]:
        import celpy

        activation: Any = celpy.json_to_cel(  # type: ignore[attr-defined]
            {"device": _device(attributes)}
        )
        left = _Budget(budget)
        evaluator = _evaluator()(self._ast, self._runner.new_activation(), left)
        try:
            result = evaluator.evaluate(activation)
        except _OverBudget:
            return False, budget - left.left
        except Exception:  # a missing attribute or a type error: no match, as in DRA
            return False, budget - left.left
        # A non-boolean result (``1 + 1``) is a type error in DRA: no match.
        matched = isinstance(result, celpy.celtypes.BoolType) and bool(result)
        return matched, budget - left.left


def warm() -> None:
    """Build the CEL parser now rather than on the first selector (a long-running service
    calls this at start)."""
    compile_selector("true")


def attr_key(attributes: Mapping[str, AttrValue]) -> AttrKey:
    """A hashable, order-independent key for an attribute set."""
    return tuple(sorted(attributes.items()))


def compile_selector(expression: str, limits: SelectorLimits = LIMITS) -> Selector:
    """Compile a CEL expression held to ``limits``.

    Raises SelectorTooCostly naming the limit broken, or SelectorError with the parser's
    message. Every place that takes a selector from outside compiles it here.
    """
    if not isinstance(expression, str):
        raise SelectorError(f"a selector is a string, got {type(expression).__name__}")
    refused = _refused.get((expression, limits))
    if refused is not None:
        raise refused.with_traceback(None)  # a fresh traceback each time, not a growing one
    try:
        return _compile(expression, limits)
    except SelectorError as exc:
        # the same refused selector sent again costs a lookup, not another parse
        with _refused_lock:
            if len(_refused) >= 1024:
                _refused.clear()
            _refused[(expression, limits)] = exc.with_traceback(None)
        raise


#: selectors refused recently (lru_cache keeps only what compiled)
_refused: dict[tuple[str, SelectorLimits], SelectorError] = {}
_refused_lock = threading.Lock()


@lru_cache(maxsize=1024)
def _compile(expression: str, limits: SelectorLimits) -> Selector:
    shown = expression if len(expression) <= 80 else expression[:77] + "..."
    try:
        check_text(expression, limits)
        ast = _env().compile(expression)
        cost = check_tree(ast, limits)
        runner = _env().program(ast)
    except SelectorLimitError as exc:
        raise SelectorTooCostly(f"selector refused: {exc}", exc.limit) from None
    except SelectorShapeError as exc:
        raise SelectorError(f"invalid selector {shown!r}: {exc}") from None
    except Exception as exc:  # celpy raises several parser error types
        message = " ".join(str(exc).split())
        raise SelectorError(f"invalid selector {shown!r}: {message}") from exc
    return Selector(expression, cost, ast, runner)


@lru_cache(maxsize=65536)
def matches(expression: str, attributes: AttrKey) -> bool:
    """Whether a device with ``attributes`` satisfies ``expression``.

    An expression that does not compile, or that is over the limits, matches nothing: the
    boundary refuses such selectors, and the core must not fail on one that slipped by.
    """
    try:
        selector = compile_selector(expression)
    except SelectorError:
        return False
    return selector.evaluate(dict(attributes), LIMITS.max_cost)
