"""Errors with a message a user can act on."""

from __future__ import annotations

import difflib
from typing import Iterable


class OrandCarError(Exception):
    """Base class; the CLI prints the message and exits non-zero."""


class UnknownNameError(OrandCarError, KeyError):
    """An unknown family, rule or engine; says which names exist and which one was meant."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        super().__init__(f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})")
        self.kind, self.name = kind, name

    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0]
