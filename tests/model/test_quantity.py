import pytest

from hetsched.model.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        (2, 2000),
        (0.5, 500),
        ("1.5", 1500),
        ("0.0001", 1),  # below a millicore rounds up, as Kubernetes does
        ("1k", 1_000_000),
        ("100u", 1),
        ("0", 0),
    ],
)
def test_parse_cpu(text: str | int | float, milli: int) -> None:
    assert parse_cpu(text) == milli


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("16Gi", 16 * 1024),
        ("512Mi", 512),
        ("1Ti", 1024 * 1024),
        ("1G", 954),  # 10^9 bytes is 953.67 MiB, rounded up
        ("1048576", 1),  # a plain number is bytes
        ("1.5Gi", 1536),
        (0, 0),
    ],
)
def test_parse_memory(text: str | int, mib: int) -> None:
    assert parse_memory(text) == mib


@pytest.mark.parametrize(
    "bad", ["", "abc", "-1", "1.2.3", "5Xi", "1 Gi Gi", -3, True, float("nan")]
)
def test_bad_quantities_are_rejected(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_cpu(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("milli", "text"), [(2000, "2"), (500, "500m"), (2500, "2500m")])
def test_format_cpu(milli: int, text: str) -> None:
    assert format_cpu(milli) == text
    assert parse_cpu(text) == milli


@pytest.mark.parametrize(("mib", "text"), [(16384, "16Gi"), (512, "512Mi"), (1048576, "1Ti")])
def test_format_memory(mib: int, text: str) -> None:
    assert format_memory(mib) == text
    assert parse_memory(text) == mib
