import pytest

from labkit.units import format_size, parse_size


@pytest.mark.parametrize(
    "text,expected",
    [
        ("10G", 10 * 10**9),
        ("190 GB", 190 * 10**9),
        ("101.5GB", 101_500_000_000),
        ("64MiB", 64 * 2**20),
        ("512", 512),
        (7, 7),
        ("1 tb", 10**12),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["ten G", "10 XB", "", "-5G", True, "1.2.3G"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_format_size():
    assert format_size(101_500_000_000) == "101.5 GB"
    assert format_size(999) == "999 B"
