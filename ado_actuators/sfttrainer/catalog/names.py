"""The names a misspelt one was likely meant as: one rule behind every "did you mean" a message
offers (entity fields and their values, model names, experiments, the actuator's parameters),
so a typo is answered alike wherever it is made."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_names(word: str, known: Iterable[str], most: int = 1) -> list[str]:
    """Up to `most` of `known` closest to `word`, closest first (difflib's ratio, at least 0.6)."""
    return difflib.get_close_matches(word, [str(k) for k in known], n=most)


def did_you_mean(word: object, known: Iterable[str], most: int = 1) -> str:
    """' (did you mean NAME?)' for the names of `known` closest to `word`, or '' when none is
    close (or `word` is not a name at all)."""
    if not isinstance(word, str):
        return ""
    close = close_names(word, known, most)
    if not close:
        return ""
    named = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f" (did you mean {named}?)"
