"""Static limits on device selectors: what a selector may cost, checked before it runs.

A selector comes from whoever submits a job, and the scheduler evaluates it on every distinct
device attribute set, so its cost is the submitter's to choose unless it is bounded. The
checks here run on the parse tree, before any evaluation:

- the expression's length (checked on the text, before parsing);
- the number of operators and operands, and the nesting of sub-expressions;
- the nesting of comprehensions (``map``, ``filter``, ``all``, ``exists``, ``exists_one``);
- the size of list and map literals and the length of string literals;
- an estimated worst-case cost: parse-tree nodes visited per evaluation, where a
  comprehension's body counts once per element of the largest list, map or string its range
  can be.

The estimate is an upper bound on the steps the evaluator takes (see
:func:`hetsched.model.selector.matches`, which enforces the same number as a budget while it
evaluates, so an estimate that missed something still cannot run away). Every walk here is
iterative: a hostile tree cannot exhaust Python's stack.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # lark is imported with the first selector checked, not with this module
    from lark import Token, Tree

__all__ = [
    "LIMITS",
    "SelectorLimitError",
    "SelectorLimits",
    "SelectorShapeError",
    "check_text",
    "check_tree",
]

#: comprehension macros of CEL: the method name's first argument is a variable bound to each
#: element of the receiver
_COMPREHENSIONS = frozenset({"map", "filter", "all", "exists", "exists_one"})
#: methods celpy offers beyond CEL that are refused: ``reduce``'s accumulator is unbounded
_REFUSED_METHODS = frozenset({"reduce"})
#: calls and indexing, whose work may grow with the size of a collection operand
_CALLS = frozenset({"member_dot_arg", "ident_arg", "dot_ident_arg", "member_index"})
_STRINGS = frozenset({"STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"})
#: the assumed size of a collection that comes from the device (its attribute map): the
#: runtime budget covers a device with more attributes than this
_UNKNOWN_SIZE = 64


@dataclass(frozen=True, slots=True)
class SelectorLimits:
    """The limits every selector is held to, wherever it is compiled.

    One step is one parse-tree node visited by the evaluator (about 5 us here), so
    ``max_cost`` bounds one evaluation on one device attribute set to tens of milliseconds.
    """

    #: characters of the expression (Kubernetes DRA's limit for a CEL selector)
    max_length: int = 10_240
    #: operators, operands and calls (parse-tree nodes other than links of grammar chains)
    max_nodes: int = 2_000
    #: nesting of sub-expressions: parentheses, list items, call arguments, macro bodies
    max_depth: int = 32
    #: comprehensions inside comprehensions (``l.map(x, m.map(y, ...))`` is 2)
    max_comprehension_nesting: int = 2
    #: elements of one list or map literal
    max_literal_items: int = 512
    #: characters of one string or bytes literal
    max_string_length: int = 1_024
    #: estimated worst-case evaluation steps on one device, also the evaluation budget
    max_cost: int = 10_000


LIMITS = SelectorLimits()


class SelectorLimitError(ValueError):
    """A selector over one of the limits; ``limit`` names it, ``value`` is what was found."""

    def __init__(self, limit: str, value: int, maximum: int, what: str) -> None:
        self.limit = limit
        self.value = value
        self.maximum = maximum
        super().__init__(f"{what} is {value}, over the limit of {maximum} ({limit})")


class SelectorShapeError(ValueError):
    """A construct refused before evaluation (a malformed macro, a refused method)."""


def check_text(expression: str, limits: SelectorLimits = LIMITS) -> None:
    """The checks that run before parsing: the length of the text."""
    if len(expression) > limits.max_length:
        raise SelectorLimitError(
            "max_length", len(expression), limits.max_length, "the expression's length"
        )


def check_tree(tree: Tree[Token], limits: SelectorLimits = LIMITS) -> int:
    """Check a parsed selector against ``limits``; returns its estimated cost in steps.

    Raises SelectorLimitError naming the first limit broken, or SelectorShapeError.
    """
    _check_size(tree, limits)
    estimate = _walk(tree, limits)
    if estimate.cost > limits.max_cost:
        raise SelectorLimitError(
            "max_cost", estimate.cost, limits.max_cost, "the estimated cost in steps"
        )
    return estimate.cost


def _check_size(tree: Tree[Token], limits: SelectorLimits) -> None:
    from lark import Tree

    nodes = 0
    stack: list[tuple[Tree[Token], int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if len(node.children) != 1 or not isinstance(node.children[0], Tree):
            nodes += 1  # a link of a grammar chain (expr -> ... -> primary) is not counted
            if nodes > limits.max_nodes:
                raise SelectorLimitError(
                    "max_nodes", nodes, limits.max_nodes, "the number of operators and operands"
                )
        if node.data == "expr":
            if depth > limits.max_depth:
                raise SelectorLimitError(
                    "max_depth", depth, limits.max_depth, "the nesting of sub-expressions"
                )
            depth += 1
        for child in node.children:
            if isinstance(child, Tree):
                stack.append((child, depth))
            elif child.type in _STRINGS and len(child.value) > limits.max_string_length:
                raise SelectorLimitError(
                    "max_string_length",
                    len(child.value),
                    limits.max_string_length,
                    "the length of a string literal",
                )


@dataclass(frozen=True, slots=True)
class _Estimate:
    #: steps one evaluation may take at most
    cost: int
    #: the most elements any list or map in the value may have
    size: int


if TYPE_CHECKING:
    #: a visit: yields (child, scope, comprehension nesting), receives the child's estimate
    _Visit = Generator[tuple[Tree[Token], dict[str, int], int], _Estimate, _Estimate]


def _walk(root: Tree[Token], limits: SelectorLimits) -> _Estimate:
    """Post-order over the tree with an explicit stack of visits (no recursion)."""
    stack: list[_Visit] = [_visit(root, {}, 0, limits)]
    result: _Estimate | None = None
    while True:
        try:
            top = stack[-1]
            child = top.send(result) if result is not None else next(top)
        except StopIteration as done:
            stack.pop()
            result = done.value
            if not stack:
                assert result is not None
                return result
            continue
        stack.append(_visit(*child, limits))
        result = None


def _visit(
    node: Tree[Token], scope: dict[str, int], nesting: int, limits: SelectorLimits
) -> _Visit:
    from lark import Token, Tree

    if node.data == "member_dot_arg":
        method = node.children[1]
        assert isinstance(method, Token)
        if method.value in _REFUSED_METHODS:
            raise SelectorShapeError(f"{method.value}() is not available in selectors")
        if method.value in _COMPREHENSIONS:
            return (yield from _comprehension(node, method.value, scope, nesting, limits))
    if node.data in {"list_lit", "map_lit"}:
        items = _literal_items(node)
        if items > limits.max_literal_items:
            raise SelectorLimitError(
                "max_literal_items",
                items,
                limits.max_literal_items,
                "the number of items in a literal",
            )
    if node.data == "literal":
        token = node.children[0]
        assert isinstance(token, Token)
        # celpy iterates strings in comprehensions: a string's size is its length
        return _Estimate(1, len(token.value) if token.type in _STRINGS else 1)
    if node.data == "ident":
        name = node.children[0]
        assert isinstance(name, Token)
        return _Estimate(1, scope.get(name.value, _UNKNOWN_SIZE))
    cost = 1
    sizes: list[int] = []
    for child in node.children:
        if isinstance(child, Tree):
            estimate = yield (child, scope, nesting)
            cost += estimate.cost
            sizes.append(estimate.size)
    largest = max(sizes, default=1)
    if node.data in _CALLS or len(sizes) > 1:
        cost += largest  # comparing, concatenating, searching: linear in the operands
    if node.data == "addition":
        return _Estimate(cost, sum(sizes))  # concatenation
    if node.data in {"list_lit", "map_lit"}:
        return _Estimate(cost, max(largest, _literal_items(node)))
    return _Estimate(cost, largest)


def _literal_items(node: Tree[Token]) -> int:
    from lark import Tree

    if not node.children:
        return 0
    inits = node.children[0]
    assert isinstance(inits, Tree)
    count = len(inits.children)
    return count // 2 if node.data == "map_lit" else count


def _comprehension(
    node: Tree[Token], method: str, scope: dict[str, int], nesting: int, limits: SelectorLimits
) -> _Visit:
    from lark import Token, Tree

    if nesting + 1 > limits.max_comprehension_nesting:
        raise SelectorLimitError(
            "max_comprehension_nesting",
            nesting + 1,
            limits.max_comprehension_nesting,
            "the nesting of comprehensions",
        )
    args = node.children[2] if len(node.children) > 2 else None
    if not isinstance(args, Tree) or len(args.children) != 2:
        raise SelectorShapeError(f"{method}() takes a variable name and an expression")
    variable, body = args.children
    assert isinstance(variable, Tree) and isinstance(body, Tree)
    names = list(variable.scan_values(lambda v: isinstance(v, Token)))
    if len(names) != 1 or names[0].type != "IDENT" or not list(variable.find_data("ident")):
        raise SelectorShapeError(f"{method}(): the first argument must be a variable name")
    receiver = node.children[0]
    assert isinstance(receiver, Tree)
    over = yield (receiver, scope, nesting)
    inner = yield (body, {**scope, names[0].value: over.size}, nesting + 1)
    # the variable's own subtree is read, never evaluated; count it anyway
    cost = 1 + _count(variable) + over.cost + over.size * (inner.cost + 1)
    if method == "map":
        return _Estimate(cost, max(over.size, inner.size))
    if method == "filter":
        return _Estimate(cost, over.size)
    return _Estimate(cost, 1)


def _count(tree: Tree[Token]) -> int:
    return sum(1 for _ in tree.iter_subtrees())
