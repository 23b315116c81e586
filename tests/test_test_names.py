"""Test files import by their base name (pytest's rootdir mode, no packages under tests/),
so two test files of one name in different folders make the second one fail to import."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).parent


def test_every_test_file_has_a_name_of_its_own() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)
    assert [name for name, count in names.items() if count > 1] == []
