"""What every spec file shares: the error that names each problem with its field path, the
strict base of the pydantic models, and reading a file's one YAML document."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from yaml import YAMLError

from hetsched.model.yamlio import safe_load

__all__ = ["SpecError", "Strict", "format_errors", "load_yaml", "yaml_problem"]


class SpecError(ValueError):
    """A spec that does not validate. ``errors`` holds one ``path: message`` per problem."""

    def __init__(self, errors: list[str], source: str = "") -> None:
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + ("\n" + head).join(errors))


_NAMES_ITS_FIELD = re.compile(r"^[\w.\[\]-]+: \S")


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith("function-") or part in {"str", "int", "float", "bool"}:
            continue  # pydantic's union-branch labels say nothing to a user
        else:
            out += f".{part}" if out else part
    return out


def format_errors(exc: ValidationError) -> list[str]:
    """``jobs[1].resources.devices[0].share: must be 1..1000, got 1500``, one per error."""
    out: list[str] = []
    for err in exc.errors():
        message = str(err["msg"]).removeprefix("Value error, ")
        path = _path(tuple(err["loc"]))
        # a whole-document check names the field itself (jobs[2].after[0]: ...)
        whole = not path and _NAMES_ITS_FIELD.match(message)
        line = message if whole else f"{path}: {message}"
        if line not in out:
            out.append(line)
    return out


class Strict(BaseModel):
    """The base of every spec model: an unknown field is an error, and a field is given by
    its alias (``cpu``) or its name (``cpu_milli``)."""

    # built at first use, not at import: every command imports the models, few use them
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


def load_yaml(path: str | Path) -> Any:
    """A YAML file's one document (see :mod:`hetsched.model.yamlio`); SpecError when the
    file cannot be read or is not YAML."""
    try:
        with open(path, "rb") as handle:
            return safe_load(handle.read())
    except OSError as exc:
        raise SpecError([f"cannot read: {exc.strerror}"], str(path)) from None
    except YAMLError as exc:
        raise SpecError([yaml_problem(exc)], str(path)) from None


def yaml_problem(exc: YAMLError) -> str:
    """A YAML error as one line that says where: ``line 4, column 1: not valid YAML: did not
    find expected ',' or '}' (while parsing a flow mapping at line 3, column 16)``; PyYAML's
    own text names the stream (``in "<byte string>"``), not the file."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if mark is None or not problem:
        return f"not valid YAML: {' '.join(str(exc).split())}"
    text = f"line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}"
    context, at = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context:
        where = f" at line {at.line + 1}, column {at.column + 1}" if at is not None else ""
        text += f" ({context}{where})"
    return text
