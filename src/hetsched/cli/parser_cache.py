"""The CEL parser's tables, kept between runs of a command.

celpy builds its parser (lark's LALR analysis of the CEL grammar) the first time a selector
is compiled: about 75 ms of CPU, paid by every short command that reads a selector (a
whole ``hetsched place`` of 5,000 jobs on 5,000 nodes takes about 1.5 s). Loading the
built tables takes about 6 ms. The tables go to ``$XDG_CACHE_HOME/hetsched`` (default
``~/.cache/hetsched``), one file per lark version, celpy parser source, grammar text and
Python version: an upgrade of any of them picks another file, and the old one is not read.

The cache is an optimization only: a folder that cannot be made, or that another user
could write to, a missing, unreadable or corrupt file, all mean building the parser as
celpy always did (and saving it when the folder allows). ``HETSCHED_NO_CACHE=1`` turns it
off.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["cache_file", "load_cel_parser"]


def _cache_dir() -> Path | None:
    """The cache folder, made private to this user when new; None when it cannot be used
    safely (another owner, or writable by others: the file is a pickle, so it must be as
    trusted as the code)."""
    if os.environ.get("HETSCHED_NO_CACHE", "") not in ("", "0"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = Path(base) / "hetsched"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return None
    return folder


def cache_file(grammar: str, builder: str) -> Path | None:
    """Where the parser tables of ``grammar`` (the CEL grammar's text) built by
    ``builder`` (the source of celpy's parser module, which holds lark's options) are kept."""
    import lark

    folder = _cache_dir()
    if folder is None:
        return None
    key = "\0".join([lark.__version__, grammar, builder, sys.version])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return folder / f"cel-parser-{digest}.pickle"


def load_cel_parser() -> None:
    """Put celpy's parser in place, from the cache when it holds it; never fails for the
    cache's sake."""
    from celpy import InterpretedRunner
    from celpy.celparser import CELParser

    if CELParser.CEL_PARSER is not None:
        return
    module = Path(sys.modules[CELParser.__module__].__file__ or "")
    try:
        path = cache_file((module.parent / "cel.lark").read_text(), module.read_text())
    except OSError:
        path = None
    if path is not None and _load(path, CELParser):
        return
    # the environment celpy builds uses its interpreter's tree class: build the same one
    CELParser(tree_class=InterpretedRunner.tree_node_class)
    if path is not None:
        _save(path, CELParser.CEL_PARSER)


def _load(path: Path, parser_class: Any) -> bool:
    from lark import Lark

    try:
        with open(path, "rb") as handle:
            parser = Lark.load(handle)
    except FileNotFoundError:
        return False
    except Exception:  # a truncated or foreign file: build the parser again
        return False
    parser_class.CEL_PARSER = parser
    return True


def _save(path: Path, parser: Any) -> None:
    try:
        handle, name = tempfile.mkstemp(dir=path.parent, prefix=".cel-parser-")
        try:
            with os.fdopen(handle, "wb") as out:
                parser.save(out)
            os.replace(name, path)  # whole or not at all, even with runs side by side
        except BaseException:
            os.unlink(name)
            raise
    except Exception:  # a full disk or a read-only home: the next run builds it again
        return
