"""The README's tour works on a fresh clone: every file it names exists, its members file is
the one docs/federation.md describes and validates, and it exports no token (the CLI reads
the one `hetsched up` writes; reading it in the shell races the service's start)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builders import EXAMPLES
from hetsched.federation.spec import load_members
from hetsched.model.specs import SpecError
from hetsched.model.yamlio import safe_load

ROOT = Path(EXAMPLES).parent
README = (ROOT / "README.md").read_text()
_NAMED = sorted(
    set(re.findall(r"(?<![\w/.])((?:examples|docs)/[\w./-]+\.(?:ya?ml|csv|md))", README))
)


def test_the_readme_names_files() -> None:
    assert "examples/federation/members.yaml" in _NAMED
    assert "examples/workloads/demo.yaml" in _NAMED


@pytest.mark.parametrize("name", _NAMED)
def test_every_file_the_readme_names_exists(name: str) -> None:
    assert (ROOT / name).is_file(), f"README.md names {name}, which is not in the repository"


@pytest.mark.parametrize("page", ["README.md", "docs/service.md"])
def test_the_default_setup_exports_no_token(page: str) -> None:
    """`hetsched up`'s default home and port need no export; a `$(cat ...)` right after
    starting it in the background reads the file before the service has written it."""
    assert "HETSCHED_TOKEN=$(cat" not in (ROOT / page).read_text()


def test_the_members_example_is_the_documented_one_and_valid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = Path(EXAMPLES) / "federation" / "members.yaml"
    monkeypatch.setenv("ROOM_A_TOKEN", "a-token")
    spec = load_members(path)
    assert [(m.name, m.kind) for m in spec.members] == [
        ("room-a", "hetsched"),
        ("prod", "kubernetes"),
    ]
    documented = (ROOT / "docs" / "federation.md").read_text()
    block = documented.split("## members.yaml", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    shown, shipped = safe_load(block.encode()), safe_load(path.read_bytes())
    # the same file but for where room-a's token comes from (a file there, a variable here)
    for member in (*shown["members"], *shipped["members"]):
        member.pop("token_file", None)
        member.pop("token_env", None)
    assert shipped == shown


def test_the_members_example_says_which_token_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ROOM_A_TOKEN", raising=False)
    with pytest.raises(SpecError, match=r"members\[0\]\.token_env: \$ROOM_A_TOKEN is not set"):
        load_members(Path(EXAMPLES) / "federation" / "members.yaml")


def test_the_readme_says_where_each_trace_comes_from() -> None:
    """The tour's ``../shared/traces`` is explained (a folder beside the checkout, not in
    the repository), with the origin of every trace folder the code and docs read there."""
    section = README[README.index("### Traces") :]
    section = section[: section.index("\n## ")]
    assert "`../shared/traces/`, a folder beside the checkout" in section
    listed = set(re.findall(r"^\| `([\w.-]+)/` \|", section, flags=re.MULTILINE))
    read = set()
    for folder in ("src", "bench", "docs"):
        for path in (ROOT / folder).rglob("*.*"):
            if path.suffix in (".py", ".md"):
                read |= set(re.findall(r"shared/traces/([\w.-]+)", path.read_text()))
    assert read and read <= listed, f"README's Traces section misses {sorted(read - listed)}"
