"""The pool: QA items in the native JSONL format, and importers that produce it."""

from .jsonl import read_pool, parse_pool_line, PoolLineError

__all__ = ["read_pool", "parse_pool_line", "PoolLineError"]
