"""docs/architecture.md stays true to the code: its package table names every top-level
package and no other, every module path it names exists, and its import graph is the one
the code's imports give (``tests/archgraph.py --write`` regenerates it). And every link
into a heading of the docs (``benchmarks.md#replay-memory``) finds that heading.

The graph script itself is tested on small package trees written here: a table of literal
import forms, and properties of the Mermaid text and of rewriting the doc's block.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from archgraph import (
    BEGIN,
    CORE,
    DOC,
    END,
    PACKAGE,
    ROOT,
    block_of,
    graph,
    main,
    mermaid,
    packages,
    rewrite,
)

#: a row of the packages table: its first cell is the package's folder, as `name/`
TABLE_ROW = re.compile(r"^\| `([a-z0-9_]+)/` \|", re.M)
#: a path the doc names: a module (`a/b.py`) or a folder (`a/b/`) in backticks
PATH = re.compile(r"`((?:[a-z0-9_]+/)+(?:[a-z0-9_]+\.py)?)`")


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_the_table_names_every_top_level_package() -> None:
    assert set(TABLE_ROW.findall(_doc())) >= set(packages())


def test_every_package_the_table_names_exists() -> None:
    assert set(TABLE_ROW.findall(_doc())) - set(packages()) == set()


def test_every_path_the_doc_names_exists() -> None:
    named = set(PATH.findall(_doc()))
    assert named, "the doc names no path: the pattern is wrong"
    missing = sorted(p for p in named if not (PACKAGE / p).exists() and not (ROOT / p).exists())
    assert missing == []


def test_the_diagram_is_the_one_the_imports_give() -> None:
    assert block_of(_doc()) == mermaid(graph()), "run: .venv/bin/python tests/archgraph.py --write"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = _slug(heading)
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return found


SLUGS = [
    ("Replay memory", "replay-memory"),
    (
        "`hetsched place` end to end (YAML in, placements out)",
        "hetsched-place-end-to-end-yaml-in-placements-out",
    ),
    (
        "All 13 traces, unallocated GPU % at 100 % arrival",
        "all-13-traces-unallocated-gpu--at-100--arrival",
    ),
    ("fgdplus (`best`) against FGD, and the limit", "fgdplus-best-against-fgd-and-the-limit"),
    ("Results: all 13 traces, seeds 42–51", "results-all-13-traces-seeds-4251"),
]


@pytest.mark.parametrize(("heading", "slug"), SLUGS)
def test_a_heading_gets_githubs_anchor(heading: str, slug: str) -> None:
    assert _slug(heading) == slug


def test_every_link_into_a_heading_of_the_docs_finds_it() -> None:
    docs = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    links = [
        (doc, target, anchor)
        for doc in docs
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md)?#([^)\s]+)\)", doc.read_text())
    ]
    assert len(links) > 10, "the link pattern finds nothing"
    broken = [
        f"{doc.relative_to(ROOT)}: {target}#{anchor}"
        for doc, target, anchor in links
        if anchor not in _anchors((doc.parent / target).resolve() if target else doc)
    ]
    assert broken == []


# --- the graph script on package trees of its own --------------------------------------


def _tree(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


CASES: list[tuple[str, dict[str, str], dict[str, set[str]]]] = [
    (
        "module-level import and from-import",
        {"a/__init__.py": "import pkg.b.x\n", "a/m.py": "from pkg.c import y\n", "b/x.py": ""}
        | {"c/y.py": ""},
        {"a": {"b", "c"}, "b": set(), "c": set()},
    ),
    (
        "an import inside a function counts",
        {"a/m.py": "def f():\n    from pkg.b import x\n", "b/x.py": ""},
        {"a": {"b"}, "b": set()},
    ),
    (
        "an import under TYPE_CHECKING does not",
        {
            "a/m.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from pkg.b import x\n",
            "b/x.py": "",
        },
        {"a": set(), "b": set()},
    ),
    (
        "typing.TYPE_CHECKING's else branch counts",
        {
            "a/m.py": "import typing\n"
            "if typing.TYPE_CHECKING:\n    import pkg.b\nelse:\n    import pkg.c\n",
            "b/x.py": "",
            "c/x.py": "",
        },
        {"a": {"c"}, "b": set(), "c": set()},
    ),
    (
        "relative imports resolve from the module's package",
        {"a/sub/m.py": "from ...b import x\nfrom .. import n\n", "a/n.py": "", "b/x.py": ""},
        {"a": {"b"}, "b": set()},
    ),
    (
        "from a package's __init__, one dot is the package itself",
        {"a/__init__.py": "from . import m\nfrom ..b import x\n", "a/m.py": "", "b/x.py": ""},
        {"a": {"b"}, "b": set()},
    ),
    (
        "a folder without __init__ is a package; top-level modules and other libraries are not",
        {"a/m.py": "import numpy\nfrom pkg import keys\nimport pkg.keys\n", "keys.py": ""},
        {"a": set()},
    ),
    (
        "a package importing itself draws no edge",
        {"a/m.py": "from pkg.a import n\nimport pkg.a\n", "a/n.py": ""},
        {"a": set()},
    ),
]


@pytest.mark.parametrize(("files", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_graph_reads_each_form_of_import(
    tmp_path: Path, files: dict[str, str], expected: dict[str, set[str]]
) -> None:
    assert graph(_tree(tmp_path, files)) == expected


def test_a_folder_with_no_python_module_is_not_a_package(tmp_path: Path) -> None:
    package = _tree(tmp_path, {"a/m.py": "", "data/x.json": "{}", "__pycache__/m.pyc": ""})
    assert packages(package) == ["a"]


def _drawn(text: str) -> set[tuple[str, str]]:
    return set(re.findall(r"^  (\w+) --> (\w+)$", text, re.M))


names = st.sampled_from([*CORE, "sim", "cli", "k8s", "ray", "agent", "drivers"])
#: graphs as ``graph`` gives them: every target is a node, and no node points at itself
graphs = st.dictionaries(names, st.sets(names), min_size=1).map(
    lambda g: {n: {t for t in ts if t != n and t in g} for n, ts in g.items()}
)


@given(graphs)
def test_every_edge_is_drawn_once_with_edges_into_the_core_drawn_to_its_box(
    edges: dict[str, set[str]],
) -> None:
    expected = {
        (s, "core" if s not in CORE and t in CORE else t) for s, ts in edges.items() for t in ts
    }
    text = mermaid(edges)
    assert _drawn(text) == expected
    assert len(re.findall(r" --> ", text)) == len(expected)


@given(graphs)
def test_every_package_appears_in_the_drawing(edges: dict[str, set[str]]) -> None:
    text = mermaid(edges)
    shown = set(re.findall(r"^ +(\w+)$", text, re.M)) | {n for e in _drawn(text) for n in e}
    assert set(edges) <= shown


@given(graphs)
def test_the_drawing_does_not_depend_on_the_order_edges_were_found(
    edges: dict[str, set[str]],
) -> None:
    reordered = {n: set(sorted(edges[n], reverse=True)) for n in sorted(edges, reverse=True)}
    assert mermaid(reordered) == mermaid(edges)


texts = st.text(alphabet=st.characters(exclude_characters="<"), max_size=40)


@given(texts, texts, texts, texts)
def test_rewriting_replaces_only_the_block(before: str, old: str, after: str, new: str) -> None:
    doc = f"{before}{BEGIN}\n{old}\n{END}{after}"
    out = rewrite(doc, new.strip("\n"))
    assert block_of(out) == new.strip("\n")
    assert out.startswith(before + BEGIN) and out.endswith(END + after)


def test_check_fails_on_a_stale_doc_and_passes_once_written(tmp_path: Path) -> None:
    doc = tmp_path / "architecture.md"
    doc.write_text(f"# Map\n\n{BEGIN}\n```mermaid\ngraph TD\n```\n{END}\n", encoding="utf-8")
    assert main(["--check", "--doc", str(doc)]) == 1
    assert main(["--write", "--doc", str(doc)]) == 0
    assert main(["--check", "--doc", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8").startswith(f"# Map\n\n{BEGIN}\n```mermaid\n")


def test_a_doc_without_the_markers_is_an_error() -> None:
    with pytest.raises(ValueError):
        block_of("# no diagram here\n")
