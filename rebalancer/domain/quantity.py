"""Kubernetes resource quantities ("250m", "1.5", "512Mi", "1e3") as integers.

CPU becomes integer millicores and memory integer bytes, once, in the adapters.
Results are cached: a large cluster repeats a few hundred distinct strings millions of times.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity."""


_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")


@lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Decimal:
    """Parse a quantity (number, then a binary suffix, a decimal suffix or an exponent) into base units."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {text!r}")
    number, suffix = match.group(1), match.group(2) or ""
    if suffix in _BINARY:
        return _number(number, text) * _BINARY[suffix]
    if suffix in _DECIMAL:
        return _number(number, text) * _DECIMAL[suffix]
    return _number(number + suffix, text)  # exponent form, e.g. 1e3


def _number(number: str, original: str) -> Decimal:
    try:
        value = Decimal(number)
    except InvalidOperation as exc:
        raise QuantityError(f"not a quantity: {original!r}") from exc
    if not value.is_finite():
        raise QuantityError(f"not a finite quantity: {original!r}")
    return value


@lru_cache(maxsize=4096)
def cpu_millis(text: str) -> int:
    """CPU quantity -> millicores, rounded up as the kubelet does ("1n" is 1m)."""
    return math.ceil(parse_quantity(text) * 1000)


@lru_cache(maxsize=4096)
def memory_bytes(text: str) -> int:
    """Memory quantity -> bytes, rounded up."""
    return math.ceil(parse_quantity(text))


def format_cores(millis: float) -> str:
    """Millicores as cores with three decimals, exact to the millicore: 1500 -> '1.500', 5 -> '0.005'."""
    return f"{millis / 1000:.3f}"


def cores_text(millis: float) -> str:
    """CPU for a sentence, in the unit every table prints: 4000 -> '4.000 cores'."""
    return f"{format_cores(millis)} cores"


def bytes_text(amount: float) -> str:
    """Memory for a sentence, in GiB: 3 * 2**30 -> '3.00 GiB', 512 * 2**20 -> '0.50 GiB'."""
    return f"{amount / 2**30:.2f} GiB"
