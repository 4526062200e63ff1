"""Cleaning: what admits or drops a pool item (``policy``: ``clean`` and the policy id), and the
same applied to a whole pool file (``pool_file``: ``clean_lines``, ``clean_pool``).

``policy`` is below ``pool_file``: ``pool_file`` imports ``policy``, never this package, so the
two never import each other.
"""

from __future__ import annotations

from .policy import ACTIONS, DROP_REASONS, DUPLICATE, POLICY_ID, clean, qa_key
from .pool_file import clean_pool

__all__ = ["ACTIONS", "DROP_REASONS", "DUPLICATE", "POLICY_ID", "clean", "clean_pool", "qa_key"]
