"""The card's error."""

from __future__ import annotations

from ..errors import OrandCarError


class CardError(OrandCarError):
    """The card cannot be rendered as asked (bad options, a report that does not fit the code)."""
