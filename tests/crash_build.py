"""A build run in a subprocess for the crash test: ``python -m tests.crash_build POOL OUT WORK REPLAY LOG``.

The engine replays recorded generations, records every id it is asked for in LOG (flushed and
fsynced before it answers, so a kill cannot hide an ask), and sleeps a little per batch so that
kills land at many different points of the build.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from orandcar_builder.engines.replay import ReplayEngine
from orandcar_builder.pipeline import build

BATCH = 4
PAUSE_S = 0.03


class LoggingReplay(ReplayEngine):
    def __init__(self, replay, log):
        super().__init__(replay)
        self.log = log

    def generate(self, requests):
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write("".join(r.item_id + "\n" for r in requests))
            fh.flush()
            os.fsync(fh.fileno())
        time.sleep(PAUSE_S)
        return super().generate(requests)


def mark_writes(log: Path) -> None:
    """Log a ``#write`` marker (and pause) each time a row group is written, so the test can kill
    the build while the dataset folder is half written."""
    from orandcar_builder.dataset import writer

    original = writer.ConfigWriter._write_group

    def _write_group(self):
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"#write {self.config}\n")
            fh.flush()
            os.fsync(fh.fileno())
        time.sleep(PAUSE_S)
        return original(self)

    writer.ConfigWriter._write_group = _write_group


def main(argv: list[str]) -> int:
    pool, out, work, replay, log = map(Path, argv)
    mark_writes(log)
    result = build(pool, out, work=work, engine=LoggingReplay(replay, log), progress=False,
                   generation_batch=BATCH)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
