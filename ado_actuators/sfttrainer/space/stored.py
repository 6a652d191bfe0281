"""A value as ado's store, a CSV or an entity gives it, read as a number: what the calibration
and the guided walk read measured properties with."""

from __future__ import annotations

from typing import Any


def number(value: Any) -> float | None:  # a CSV cell, a stored property, an entity's value
    """The value as a float; None where it is none: missing, text, or NaN (ado's "not
    measured")."""
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return None if found != found else found
