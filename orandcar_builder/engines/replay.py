"""The replay engine: generations recorded earlier, read back from a JSON-lines file.

One object per line: ``{"id": QA id, "text": raw model output, "finish_reason": "stop" |
"length"}``. ``finish_reason`` may be left out (``"stop"``), which is how judge recordings
(``{"id", "text"}``) are usually written. Optional keys written by ``export_generations`` are
read back too: ``question`` (checked against the request, so a recording is never replayed for
a different question), ``model``, ``revision``, ``prompt``, ``prompt_tokens``,
``completion_tokens`` and ``unsupported``.

``export_generations`` writes this format from any engine's output, so a GPU run can be
replayed anywhere.

The engine reads the whole file when made, and names every bad line then. Made ``lazy`` (as the
build makes it where its cache already holds answers of the file's sha256: ``pipeline.stages.
generate.open_engines``), it hashes the file and reads it when first asked, so a rerun answered
wholly from the cache does not read it at all.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from ..errors import OrandCarError
from ..files import JsonLimitError, JsonLinesFile, loads_bounded
from ..images import sha256_file
from ..records import Generation, Request
from ..vocab import FINISH_REASONS, FINISH_STOP
from .base import Completion, EngineUnavailable, GenerationSettings, stream_batches
from .reasoning import load_reasoning_parser, make_generation

DEFAULT_FINISH_REASON = FINISH_STOP
# A replay file is written as <name>.tmp and renamed into place when complete.
TEMP_SUFFIX = ".tmp"
REPLAY_MODEL = "replay"
# Optional keys and the type each must have.
OPTIONAL_FIELDS: dict[str, type | tuple[type, ...]] = {
    "question": str,
    "model": str,
    "revision": str,
    "prompt": str,
    "prompt_tokens": int,
    "completion_tokens": int,
    "unsupported": str,
}
# How many missing ids an error message lists; the exception carries them all.
MAX_LISTED_IDS = 100


class ReplayFileError(EngineUnavailable):
    """A replay file that cannot be used; the message names the file and every bad line. The engine
    cannot run: a stream stops on it (``FATAL_ERRORS``), whether it is read at the start or when
    first asked (``lazy``)."""


class ReplayMissingError(OrandCarError):
    """Requests with no recording in the replay file; ``missing`` holds all their ids."""

    def __init__(self, path: str, missing: Sequence[str]):
        self.path, self.missing = path, list(missing)
        shown = ", ".join(self.missing[:MAX_LISTED_IDS])
        more = len(self.missing) - MAX_LISTED_IDS
        tail = f", ... and {more} more" if more > 0 else ""
        super().__init__(
            f"{path}: no recording for {len(self.missing)} request(s): {shown}{tail}; "
            "record them (export a run of the engine that made this file) or drop them from the pool"
        )


class ReplayQuestionMismatch(OrandCarError):
    """A recording made for a different question than the one now asked."""


@dataclass(frozen=True)
class Recording:
    id: str
    text: str
    finish_reason: str
    line: int
    extra: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str) -> Any:
        return dict(self.extra).get(key)


def parse_recording(line: str, lineno: int) -> Recording:
    """One replay line as a Recording; ValueError with the reason when it is malformed."""
    try:
        obj = loads_bounded(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except JsonLimitError as exc:
        raise ValueError(f"not read: {exc.detail}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    for key in ("id", "text"):
        if key not in obj:
            raise ValueError(f"missing field {key!r}")
        if not isinstance(obj[key], str):
            raise ValueError(f"field {key!r} must be a string, got {type(obj[key]).__name__}")
    if not obj["id"]:
        raise ValueError("field 'id' is empty")
    finish = obj.get("finish_reason", DEFAULT_FINISH_REASON)
    if finish not in FINISH_REASONS:
        raise ValueError(f"field 'finish_reason' must be one of {', '.join(FINISH_REASONS)}, got {finish!r}")
    extra = []
    for key, kind in OPTIONAL_FIELDS.items():
        value = obj.get(key)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"field {key!r} must be {kind.__name__}, got {type(value).__name__}")
        extra.append((key, value))
    return Recording(id=obj["id"], text=obj["text"], finish_reason=finish, line=lineno, extra=tuple(extra))


def read_recordings(path: str | os.PathLike) -> dict[str, Recording]:
    """All recordings of a replay file by id. Raises ReplayFileError listing every malformed line
    (with its number) and every id recorded twice with different content."""
    path = str(path)
    recordings, problems, _ = _read_file(path)
    return _usable(path, recordings, problems)


def _usable(path: str, recordings: dict[str, Recording], problems: list[str]) -> dict[str, Recording]:
    if problems:
        raise ReplayFileError(f"{path}: {len(problems)} malformed line(s):\n  " + "\n  ".join(problems))
    return recordings


def _unreadable(path: str, exc: OSError) -> ReplayFileError:
    return ReplayFileError(f"{path}: cannot read replay file ({exc.strerror or exc})")


def _read_file(path: str) -> tuple[dict[str, Recording], list[str], str]:
    """The recordings of ``path`` by id, the problems of its lines, and the sha256 of the bytes
    read, in one pass."""
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise _unreadable(path, exc) from None
    digest = hashlib.sha256()
    recordings: dict[str, Recording] = {}
    problems: list[str] = []
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            digest.update(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(f"line {lineno}: not UTF-8 (byte {exc.start + 1})")
                continue
            if not line.strip():
                continue
            try:
                rec = parse_recording(line, lineno)
            except ValueError as exc:
                problems.append(f"line {lineno}: {exc}")
                continue
            earlier = recordings.get(rec.id)
            if earlier is None:
                recordings[rec.id] = rec
            elif (earlier.text, earlier.finish_reason, earlier.extra) != (rec.text, rec.finish_reason, rec.extra):
                problems.append(f"line {lineno}: id {rec.id!r} already recorded differently on line {earlier.line}")
    return recordings, problems, digest.hexdigest()


class ReplayEngine:
    """Answers each request with its recording, by item id. Also serves the judge pass."""

    kind = "replay"
    can_judge = True
    reads_lazily = True  # takes lazy=True, and load() (the build's open_engines)
    SECRET_OPTIONS: tuple[str, ...] = ()  # it takes none

    def __init__(
        self,
        replay: str | os.PathLike,
        *,
        reasoning_parser: Optional[str] = None,
        tokenizer: Any = None,
        lazy: bool = False,
    ):
        """Reads ``replay`` now (a ReplayFileError names every bad line), or with ``lazy`` only
        hashes it and reads it when first asked (``load``): a build whose cache already holds
        this file's answers (the same bytes were read without a problem before) asks nothing."""
        self.path = str(replay)
        self._recordings: Optional[dict[str, Recording]] = None
        if lazy:
            try:
                self.sha256 = sha256_file(self.path)
            except OSError as exc:
                raise _unreadable(self.path, exc) from None
        else:
            recordings, problems, self.sha256 = _read_file(self.path)
            self._recordings = _usable(self.path, recordings, problems)
        self.reasoning_parser = reasoning_parser
        self._parser = load_reasoning_parser(reasoning_parser, tokenizer) if reasoning_parser else None

    @property
    def loaded(self) -> bool:
        return self._recordings is not None

    def load(self) -> None:
        """Read the file now if it was not (``lazy``); a ReplayFileError names every bad line, or
        says the file changed since it was hashed (its answers would not be the fingerprint's)."""
        if self._recordings is not None:
            return
        recordings, problems, sha256 = _read_file(self.path)
        if sha256 != self.sha256:
            raise ReplayFileError(f"{self.path}: the replay file changed while in use (sha256 {self.sha256[:12]}... "
                                  f"when opened, {sha256[:12]}... now); run again")
        self._recordings = _usable(self.path, recordings, problems)

    @property
    def recordings(self) -> dict[str, Recording]:
        self.load()
        return self._recordings  # type: ignore[return-value]

    @recordings.setter
    def recordings(self, value: dict[str, Recording]) -> None:
        self._recordings = value

    def fingerprint(self) -> dict:
        return {"kind": self.kind, "sha256": self.sha256, "reasoning_parser": self.reasoning_parser}

    def generation_settings(self) -> GenerationSettings:
        """Nothing but its kind: a recording does not say how it was sampled, nor whether the
        model was asked to reason (the build names the models and revisions the recordings carry)."""
        return GenerationSettings(engine=self.kind)

    def stream(self, requests: Iterable[Request]) -> Iterator[Completion]:
        """Each request's recording as it is pulled; a request with no recording, or recorded for
        another question, is a failed Completion (the others go on)."""
        return stream_batches(self.generate, requests, batch_size=1, kind=self.kind)

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        recordings = self.recordings  # read here when the engine was made lazy
        missing = [r.item_id for r in requests if r.item_id not in recordings]
        if missing:
            raise ReplayMissingError(self.path, list(dict.fromkeys(missing)))
        return [self._replay(r, recordings[r.item_id]) for r in requests]

    def _replay(self, request: Request, rec: Recording) -> Generation:
        question = rec.get("question")
        if question is not None and question != request.question:
            raise ReplayQuestionMismatch(
                f"{self.path}:{rec.line}: recording for {request.item_id!r} answers a different "
                f"question ({question!r}) than the one asked ({request.question!r}); re-record it"
            )
        gen = make_generation(
            request,
            rec.text,
            rec.finish_reason,
            model=rec.get("model") or REPLAY_MODEL,
            revision=rec.get("revision") or "",
            parser=self._parser,
            prompt=rec.get("prompt"),
            prompt_tokens=rec.get("prompt_tokens"),
            completion_tokens=rec.get("completion_tokens"),
        )
        unsupported = rec.get("unsupported")
        if unsupported is not None:
            gen = replace(gen, unsupported=unsupported)
        return gen


def recording_line(generation: Generation, question: Optional[str] = None) -> dict:
    """The replay-file object for one generation (None-valued optional keys left out)."""
    obj: dict[str, Any] = {
        "id": generation.item_id,
        "text": generation.text,
        "finish_reason": generation.finish_reason,
    }
    optional = {
        "question": question,
        "model": generation.model or None,
        "revision": generation.revision or None,
        "prompt": generation.prompt,
        "prompt_tokens": generation.prompt_tokens,
        "completion_tokens": generation.completion_tokens,
        "unsupported": generation.unsupported,
    }
    obj.update({k: v for k, v in optional.items() if v is not None})
    return obj


class ReplayWriter(JsonLinesFile):
    """A replay file written one generation at a time, under a temporary name beside ``path``
    until ``commit`` renames it into place (after an fsync); ``abort`` removes it and leaves
    ``path`` as it was (``files.StagedFile``). The one writer of the format: ``export_generations``
    and the build's ``--export-generations`` both write through it."""

    def __init__(self, path: str | os.PathLike):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        super().__init__(path, suffix=TEMP_SUFFIX, fsync=True)

    def add(self, generation: Generation, question: Optional[str] = None) -> None:
        """One line for ``generation``; ``question`` (the exact text the model received), when
        given, is recorded so that replay checks it."""
        if generation.finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"generation {generation.item_id!r} has finish_reason {generation.finish_reason!r}; "
                f"only {', '.join(FINISH_REASONS)} can be replayed"
            )
        self.write(recording_line(generation, question))


def export_generations(
    generations: Iterable[Generation],
    path: str | os.PathLike,
    *,
    requests: Optional[Sequence[Request]] = None,
) -> int:
    """Write ``generations`` as a replay file at ``path`` (replaced atomically) and return how
    many lines were written. With ``requests`` (aligned by item id) each line also records the
    question, which replay then checks."""
    questions = {r.item_id: r.question for r in requests} if requests is not None else {}
    with ReplayWriter(path) as out:
        for gen in generations:
            out.add(gen, questions.get(gen.item_id))
    return out.lines
