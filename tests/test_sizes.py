"""Memory sizes: k/M/G are powers of 10, Ki/Mi/Gi powers of 2, B optional, case-sensitive."""

from __future__ import annotations

from typing import Any

import pytest

from orion_common.sizes import ACCEPTED, MAX_SIZE, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1024", 1024),
        ("100B", 100),
        ("3k", 3000),
        ("3kB", 3000),
        ("500M", 500 * 10**6),
        ("500MB", 500 * 10**6),
        ("2G", 2 * 10**9),
        ("2GB", 2 * 10**9),
        ("4Ki", 4 * 2**10),
        ("4KiB", 4 * 2**10),
        ("512Mi", 512 * 2**20),
        ("512MiB", 512 * 2**20),
        ("4Gi", 4 * 2**30),
        ("4GiB", 4 * 2**30),
    ],
)
def test_every_suffix_with_and_without_b(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5GiB", 3 * 2**29),
        ("0.5Ki", 512),
        (".5Ki", 512),
        ("2.5k", 2500),
        ("0.1G", 10**8),  # exact: no float rounding below the true value
        ("1.5", 1),  # fractional bytes round down
        ("1.0000000001Ki", 1024),
        ("  4GiB\n", 4 * 2**30),
        ("4 GiB", 4 * 2**30),  # format_size's output reads back
    ],
)
def test_decimals_and_whitespace(text: str, expected: int) -> None:
    assert parse_size(text) == expected


def test_integers_are_bytes() -> None:
    assert parse_size(1) == 1
    assert parse_size(80 * 2**30) == 80 * 2**30
    assert parse_size(MAX_SIZE) == MAX_SIZE


LOW = "it must be at least 1 byte; "
HIGH = f"it must be at most {MAX_SIZE} bytes; "


@pytest.mark.parametrize(
    ("value", "shown", "why"),
    [
        ("2XB", '"2XB"', ""),
        ("", '""', ""),
        ("GiB", '"GiB"', ""),
        ("1e9", '"1e9"', ""),
        ("+5", '"+5"', ""),
        ("1,5G", '"1,5G"', ""),
        ("4 GiB B", '"4 GiB B"', ""),
        ("-1", '"-1"', LOW),
        ("0", '"0"', LOW),
        ("0.5", '"0.5"', LOW),
        ("0.0001k", '"0.0001k"', LOW),
        (-1, "-1", LOW),
        (0, "0", LOW),
        (MAX_SIZE + 1, str(MAX_SIZE + 1), HIGH),
        ("99999999999G", '"99999999999G"', HIGH),
        (True, "true", ""),  # Python's bool is an int, but not a size
        (False, "false", ""),
        (4.0, "4.0", ""),
        (None, "null", ""),
    ],
)
def test_refusals_say_what_is_accepted(value: Any, shown: str, why: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_size(value)
    assert str(info.value) == f"{shown} is not a size: {why}{ACCEPTED}"


def test_the_message_of_the_example() -> None:
    with pytest.raises(ValueError) as info:
        parse_size("2XB")
    assert str(info.value) == (
        '"2XB" is not a size: use bytes or a number with k, M, G (powers of 10) or Ki, Mi, Gi '
        "(powers of 2), optionally followed by B"
    )
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "meant"),
    [("4 gib", "GiB"), ("5m", "M"), ("5mb", "MB"), ("4K", "k"), ("1kib", "KiB"), ("7b", "B")],
)
def test_suffixes_are_case_sensitive_and_the_error_says_so(text: str, meant: str) -> None:
    suffix = text.lstrip("0123456789 ")
    with pytest.raises(ValueError) as info:
        parse_size(text)
    assert str(info.value) == (
        f'"{text}" is not a size: suffixes are case-sensitive ("{suffix}" is not "{meant}"); '
        f"{ACCEPTED}"
    )


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (1, "1 B"),
        (1000, "1000 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (512 * 2**20, "512 MiB"),
        (500 * 10**6, "476.84 MiB"),
        (4 * 2**30, "4 GiB"),
        (3 * 2**29, "1.5 GiB"),
        (81559 * 2**20, "79.65 GiB"),
        (2**30 - 1, "1 GiB"),  # rounds up into the larger unit, not "1024 MiB"
        (2048 * 2**30, "2048 GiB"),
    ],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text
