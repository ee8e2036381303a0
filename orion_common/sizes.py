"""Memory sizes as people write them ("4GiB", "500M", "1.5 GiB") and back.

Users give memory limits in ``jobs.json``; a bare byte count is error-prone (how many zeros has
12 GiB?), and the two conventions in use, powers of 10 (``M``) and powers of 2 (``Mi``), differ
by 5-7 %. We follow Gemini's convention: ``k``, ``M``, ``G`` are powers of 10 and ``Ki``, ``Mi``,
``Gi`` powers of 2, each with or without a trailing ``B``. Suffixes are case-sensitive, so a
lower-case ``m`` (milli, in SI) is refused with a hint rather than guessed.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

_UNITS: dict[str, int] = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
}
SUFFIXES: dict[str, int] = {
    **_UNITS,
    **{f"{unit}B": factor for unit, factor in _UNITS.items()},
}
"""Every accepted suffix (``""`` and ``"B"``: bytes) and its factor."""

_BY_CASEFOLD = {suffix.casefold(): suffix for suffix in SUFFIXES}
MAX_SIZE = 2**63 - 1
"""The largest size accepted: the scheduler stores sizes as signed 64-bit integers."""

ACCEPTED = (
    "use bytes or a number with k, M, G (powers of 10) or Ki, Mi, Gi (powers of 2), "
    "optionally followed by B"
)
_SIZE = re.compile(r"(?P<number>-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))\s*(?P<suffix>[A-Za-z]*)")
_BINARY_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _shown(value: object) -> str:
    """``value`` the way it was written in JSON (strings double-quoted, ``true``)."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def _refuse(value: object, reason: str = "") -> ValueError:
    return ValueError(f"{_shown(value)} is not a size: {reason + '; ' if reason else ''}{ACCEPTED}")


def parse_size(value: int | str) -> int:
    """Bytes meant by ``value``: a positive integer (bytes) or a string such as ``"1.5GiB"``.

    A fractional result is rounded down to whole bytes; anything below 1 byte, above
    :data:`MAX_SIZE`, or not of that form raises :class:`ValueError` with a one-line message that
    says what is accepted. ``True`` is not a size, although Python counts it as an integer.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _refuse(value)
    if isinstance(value, int):
        size = Fraction(value)
    else:
        match = _SIZE.fullmatch(value.strip())
        if match is None:
            raise _refuse(value)
        suffix = match["suffix"]
        if suffix not in SUFFIXES:
            meant = _BY_CASEFOLD.get(suffix.casefold())
            hint = f'suffixes are case-sensitive ("{suffix}" is not "{meant}")' if meant else ""
            raise _refuse(value, hint)
        size = Fraction(match["number"]) * SUFFIXES[suffix]
    if size < 1:
        raise _refuse(value, "it must be at least 1 byte")
    if size > MAX_SIZE:
        raise _refuse(value, f"it must be at most {MAX_SIZE} bytes")
    return int(size)  # int() of a positive Fraction rounds down


def format_size(n: int) -> str:
    """``n`` bytes, short, for messages: ``"4 GiB"``, ``"1.5 GiB"``, ``"512 MiB"``, ``"1000 B"``.

    Powers of 2 with at most two decimals, as GPU memory is usually reported (nvidia-smi: MiB);
    the largest unit that shows at least 1 after rounding, so 1023.999 MiB reads "1 GiB".
    """
    for name, factor in _BINARY_UNITS:
        amount = round(n / factor, 2)
        if amount >= 1:
            return f"{amount:.2f}".rstrip("0").rstrip(".") + f" {name}"
    return f"{n} B"
