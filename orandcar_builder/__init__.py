"""OrandCar builder: build, check and publish a rejection-sampled VLM dataset."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

# Arrow's allocator. pyarrow reads ARROW_DEFAULT_MEMORY_POOL once, when it is imported, and its
# Linux wheels default to mimalloc, which on a build's pattern (many small Arrow chunks made and
# freed while a row group fills) keeps far more resident than it holds: a 200k-QA build peaked at
# 418.7 MiB with mimalloc and 344.2 MiB with jemalloc (benchmarks/README.md, "Arrow's allocator: jemalloc"). So the
# builder asks for jemalloc, on Linux (where the wheels carry it), when pyarrow is not imported
# yet and the user has not chosen a pool; the processes the build spawns inherit the choice.
# The bytes written do not depend on the allocator (tests/test_memory_pool.py).
if _sys.platform.startswith("linux") and "pyarrow" not in _sys.modules:
    _os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
