"""The methods ``dataclasses`` generates, compiled once and kept between runs of a command.

When a dataclass is created, ``dataclasses`` writes its ``__init__``, ``__repr__``,
``__eq__``, ``__hash__`` (and ``__setattr__``/``__delattr__`` for a frozen one) as source
text and compiles the text with ``exec``, at every start of every process: the 75
dataclasses ``hetsched place`` imports, and those of typer and pydantic, took about 40 ms of
CPU that way, three quarters of it compiling. :func:`install` has ``dataclasses`` run code
compiled from the same text instead: compiled once, kept in the cache folder of the CEL
parser's tables (:func:`~hetsched.cli.parser_cache.cache_dir`, one file per Python
version) and read back with ``marshal``, as Python reads a compiled module. Running code
compiled from a text is what ``exec`` of that text does, so every class is the same.

The cache is an optimization only: a folder that cannot be used safely, a missing,
unreadable or corrupt file, all mean compiling as ``dataclasses`` always does;
``HETSCHED_NO_CACHE=1`` turns it off. Texts compiled in a run are saved when it ends; a file
holding many texts this run did not use (older sources) is rewritten with this run's only.
"""

from __future__ import annotations

import atexit
import builtins
import dataclasses
import marshal
import os
import sys
import zlib
from pathlib import Path
from types import CodeType
from typing import Any

from hetsched.cli.parser_cache import cache_dir

__all__ = ["install"]

#: texts kept beyond this run's before the file is rewritten with this run's only
_MAX_UNUSED = 1_000


class _Codes:
    """Compiled texts by their source, each marshalled on its own (decoded when a class
    asks for it: a file written by a larger command costs a smaller one little); stands in
    for ``exec`` inside ``dataclasses``."""

    def __init__(self, path: Path | None, stored: dict[str, bytes]) -> None:
        self.path = path
        self.stored = stored
        self.used: set[str] = set()
        self.compiled = 0

    def exec(self, source: Any, *namespaces: Any, **options: Any) -> None:
        """``exec(source, globals, locals)``, with ``source`` compiled from the cache."""
        if type(source) is not str or options or len(namespaces) > 2:
            builtins.exec(source, *namespaces, **options)
            return
        # the caller's namespaces where it gave none, as the builtin takes them
        caller = sys._getframe(1)
        globals_ = namespaces[0] if namespaces else None
        locals_ = namespaces[1] if len(namespaces) > 1 else None
        if globals_ is None:
            globals_ = caller.f_globals
            if locals_ is None:
                locals_ = caller.f_locals
        builtins.exec(self._code(source), globals_, locals_)

    def _code(self, source: str) -> CodeType:
        self.used.add(source)
        data = self.stored.get(source)
        if data is not None:
            try:
                code = marshal.loads(data)
            except Exception:  # a damaged entry: compiled again below
                code = None
            if type(code) is CodeType:
                return code
        code = compile(source, "<string>", "exec", dont_inherit=True)
        self.stored[source] = marshal.dumps(code)
        self.compiled += 1
        return code

    def save(self) -> None:
        """Write the texts compiled in this run (and those kept from before, unless too
        many of them went unused), whole or not at all."""
        if self.path is None or not self.compiled:
            return
        keep = self.stored
        if len(keep) - len(self.used) > _MAX_UNUSED:
            keep = {text: data for text, data in keep.items() if text in self.used}
        import tempfile  # only when there is something to save

        try:
            handle, name = tempfile.mkstemp(dir=self.path.parent, prefix=".dataclass-code-")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(marshal.dumps(keep))
                os.replace(name, self.path)
            except BaseException:
                os.unlink(name)
                raise
        except Exception:  # a full disk or a read-only home: the next run compiles again
            return


def _read(path: Path) -> dict[str, bytes]:
    try:
        with open(path, "rb") as handle:
            stored = marshal.loads(handle.read())  # 5x faster than marshal.load(handle)
    except Exception:  # missing, truncated or foreign: compile as dataclasses does
        return {}
    if type(stored) is not dict or not all(
        type(text) is str and type(data) is bytes for text, data in stored.items()
    ):
        return {}
    return stored


def install() -> None:
    """From now on, dataclasses created in this process run cached compiled methods; the
    texts compiled meanwhile are saved when the process ends. Once per process."""
    if "exec" in vars(dataclasses):
        return  # installed already (or replaced by someone else: leave it)
    folder = cache_dir()
    path = None
    if folder is not None:
        key = f"{sys.version}\0{marshal.version}\0{dataclasses.__file__}".encode()
        path = folder / f"dataclass-code-{zlib.crc32(key):08x}.marshal"
    codes = _Codes(path, _read(path) if path is not None else {})
    dataclasses.exec = codes.exec  # type: ignore[attr-defined]  # a name the module looks up
    atexit.register(codes.save)
