"""Writing some configs in a process of its own, while the build's process writes the others: the
write stage's second core.

Each config's shards depend only on its own rows (``writer.DatasetWriter``), and each process
plans its rows from the same ``work/decisions.parquet`` (``route.RoutePlan``, its scratch files in a
folder of its own), so which process writes a config cannot change a byte. The process is a fresh
interpreter (``python -c``, calling ``main`` here), not a fork of the build's (which
holds threads) nor multiprocessing's spawn (which imports the caller's main script again). It
is started while the build's process sorts the decisions (``WriteStage.prepare``) and imports the
writer at once; then it reads its task as one JSON line on stdin and answers one JSON line on
stdout, the writer's summary of its configs or the error that stopped it (an image changed since
it was admitted, a disk that filled up, ...), which the build's process raises as its own. Ctrl-C
reaches both processes once the child has imported the writer: it starts with SIGINT blocked
(``interrupts.sigint_blocked``), so that a Ctrl-C while its interpreter starts or imports waits
until ``main`` can end it quietly (130), not with a KeyboardInterrupt traceback on the terminal. A
build that stops for any other reason interrupts a child that has its task, waits for it to clean
up, and removes its scratch folder, and kills one that has none (it has written nothing).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from ..childproc import child_env, program
from ..images import ImageError
from ..interrupts import sigint_blocked, unblock_sigint

# Seconds a child that was interrupted gets to remove its files before it is killed.
STOP_GRACE_S = 10.0
# The child's program (``childproc.program``).
_CHILD = program(__name__)


class ApartWriter:
    """A child process that writes ``configs`` into a dataset folder; a context manager. It starts
    at once (its interpreter, pyarrow, datasets: some 1 s of CPU, while the build's process still
    sorts the decisions) and waits; ``write(decisions, out)`` hands it its task, and ``result()``
    waits for the child and returns its summary (``write_dataset``'s, for those configs) or raises
    its error. A child never handed a task is ended by ``close()`` (or the context's exit)."""

    def __init__(self, configs: tuple[str, ...], max_shard_bytes: int, scratch_parent: Path):
        self.configs, self.max_shard_bytes = tuple(configs), max_shard_bytes
        self.scratch = Path(tempfile.mkdtemp(prefix=".write-apart-", dir=scratch_parent))
        self.tasked = False
        self.child: Optional[subprocess.Popen] = None
        try:
            with sigint_blocked():  # until the child's main takes it (the module docstring)
                self.child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, env=child_env())
        except BaseException:  # a Ctrl-C held while it started is raised at the unblock: the child is killed
            self._stop()
            raise

    def __enter__(self) -> "ApartWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop()

    def close(self) -> None:
        self._stop()

    def waiting(self) -> bool:
        """Whether the child is alive and has no task yet (one killed meanwhile, by the system's
        out-of-memory killer say, cannot take one)."""
        return self.child is not None and not self.tasked and self.child.poll() is None

    def write(self, decisions: Path, out: Path) -> None:
        """Hand the child its task: ``configs`` of ``decisions`` (sorted, final) into ``out``."""
        task = {"decisions": str(decisions), "out": str(out), "configs": list(self.configs),
                "max_shard_bytes": self.max_shard_bytes, "scratch": str(self.scratch)}
        try:
            self.tasked = True
            self.child.stdin.write((json.dumps(task) + "\n").encode("utf-8"))
            self.child.stdin.close()
        except BaseException:
            self._stop()
            raise

    def result(self) -> dict:
        answer = self.child.stdout.read()
        code = self.child.wait()
        try:
            reply = json.loads(answer.decode("utf-8").strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RuntimeError(f"the process writing configs apart ended with code {code} and no answer") from None
        if "summary" in reply:
            return reply["summary"]
        raise _error(reply["error"])

    def _stop(self) -> None:
        """End a child still running: one never handed a task has written nothing and is killed;
        one writing is interrupted (it removes its files) and waited for. Then remove the scratch
        folder."""
        child, self.child = self.child, None
        if child is not None and child.poll() is None:
            if not self.tasked:
                child.kill()
            else:
                child.send_signal(signal.SIGINT)
            try:
                child.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if child is not None:
            for pipe in (child.stdin, child.stdout):
                if pipe is not None and not pipe.closed:
                    try:
                        pipe.close()
                    except OSError:  # a task line the killed child never read
                        pass
        import shutil

        shutil.rmtree(self.scratch, ignore_errors=True)


def _error(error: dict) -> BaseException:
    """The child's error as the build's process raises it."""
    kind, message = error.get("kind"), error.get("message", "")
    if kind == "image":
        return ImageError(message, error.get("reason"))
    if kind == "os":
        number = error.get("errno")
        return OSError(number, error.get("strerror") or os.strerror(number or errno.EIO), error.get("filename"))
    if kind == "interrupted":
        return KeyboardInterrupt()
    if kind == "value":
        return ValueError(message)
    return RuntimeError(f"the process writing configs apart failed: {message}")


def _reply_error(exc: BaseException) -> dict:
    if isinstance(exc, ImageError):
        return {"kind": "image", "message": str(exc), "reason": exc.reason}
    if isinstance(exc, OSError):
        return {"kind": "os", "message": str(exc), "errno": exc.errno, "strerror": exc.strerror,
                "filename": None if exc.filename is None else str(exc.filename)}
    if isinstance(exc, KeyboardInterrupt):
        return {"kind": "interrupted", "message": "interrupted"}
    if isinstance(exc, ValueError):
        return {"kind": "value", "message": str(exc)}
    return {"kind": type(exc).__name__, "message": f"{type(exc).__name__}: {exc}"}


def main() -> int:
    # Imported before the task comes: the build's process is meanwhile sorting the decisions. SIGINT
    # is still blocked, as the build started this process: a Ctrl-C meanwhile waits for the unblock.
    try:
        from .stages.write import write_configs
    except BaseException as exc:  # noqa: BLE001 - answered once the task comes
        write_configs, failure = None, exc
    try:
        unblock_sigint()  # a Ctrl-C that waited is raised here
        line = sys.stdin.readline()
        if not line:  # the build ended before it handed a task
            return 0
        task = json.loads(line)
    except KeyboardInterrupt:  # Ctrl-C before the build needed this process: nothing to remove
        return 130
    try:
        if write_configs is None:
            raise failure
        summary = write_configs(Path(task["decisions"]), Path(task["out"]), tuple(task["configs"]),
                                max_shard_bytes=task["max_shard_bytes"], scratch=Path(task["scratch"]))
        reply = {"summary": summary}
    except BaseException as exc:  # every error goes back to the build's process, which raises it
        reply = {"error": _reply_error(exc)}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
    return 0

