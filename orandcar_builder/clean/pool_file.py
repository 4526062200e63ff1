"""``clean_pool``: clean a pool file into a cleaned pool file and a file of dropped lines.

Every line of the input ends in exactly one of the two outputs: the cleaned pool (admitted
items, native format, paths relative to the new file, with a ``clean`` field naming the policy
and actions) or the dropped file (one JSON object per dropped line: where, id, reason, detail,
in line order). The returned report says how many went where and why, and is checked to add up.

The cleaned pool keeps the trust its input had on this machine (``pool.seal``): its images passed
the input's guard (the input's folder and the folders the input's seal vouches for), so a cleaned
pool written elsewhere is sealed with those folders, and builds as it is. With the guard off
(``allow_outside_paths``) nothing vouched for the images, and the cleaned pool gets no seal.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from itertools import islice
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from ..errors import OrandCarError
from ..families import Families
from ..files import JsonLinesFile, replaced_on_success, within
from ..images import ImagePolicy
from ..pool.jsonl import SOURCE_FIELDS, ParsedLine, decode_json_lines, encode_pool_line, parsed_lines, read_parsed
from ..pool.seal import sealed_roots, write_seal
from ..records import Admitted, Dropped
from ..spill import Spool
from ..workdir import WorkDir
from .policy import DROP_REASONS, POLICY_ID, Cleaner
from .purity import measure_lines


def clean_lines(pool: Path, report: Optional[dict] = None, *, limit: Optional[int] = None,
                spill_dir: Optional[Union[str, os.PathLike]] = None,
                images: Optional[ImagePolicy] = None, workers: int = 1,
                families: Optional[Families] = None, named: Optional[Callable[[str], None]] = None,
                before_images: Optional[Callable[[], None]] = None) -> Iterator[Union[Admitted, Dropped]]:
    """Every line of the pool file as one Admitted or Dropped record, in line order: what
    read_pool drops (bad lines, images, repeated ids) and cleaning's verdict on the rest.

    Purity shares come from a first, image-free pass over the file (purity.measure_lines), so the
    items then stream through cleaning and none is held. That pass decodes and checks every line
    once and keeps the result in a scratch file (``spill.Spool``, under ``spill_dir``; about the
    pool file's size, unnamed, gone when the read ends), which the second pass
    (``pool.jsonl.read_parsed``: ids, paths, images) reads back instead of the pool file: no line
    is decoded twice. ``source.image`` paths resolve against the pool file's folder,
    like the item's own image path. ``report`` is filled at the end. Both passes remember the ids
    seen in scratch files under ``spill_dir`` (e.g. the build's work dir; None: the system temp
    dir) once there are many; the second none at all when the first found every id unique.
    ``images`` bounds and confines the image files (``pool.jsonl.read_pool``); ``workers`` > 1
    checks them on that many processes, with the same records. ``families``: the registry whose
    families are admitted (a build's, a recipe's included; None: the code's).
    ``named(path)`` hears of every file the lines name (``read_pool``). ``before_images()`` is
    called once the first pass is done and before any image file is opened (the admission process
    waits there until the build has made its engine); what it raises ends the read.
    """
    pool = Path(pool)
    report = report if report is not None else {}
    report.setdefault("policy", POLICY_ID)
    with Spool(spill_dir) as spool:
        # The lines read_pool would read: --limit applied (a negative limit is refused below).
        lines = islice(decode_json_lines(pool), limit if limit is None or limit >= 0 else 0)
        meter, repeats = measure_lines(parsed_lines(lines, families), spill_dir=spill_dir, keep=_spooled(spool))
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be 0 or more, not {limit}")
        if before_images is not None:
            before_images()
        records = read_parsed(pool, _unspooled(spool.replay()), spill_dir=spill_dir, images=images, workers=workers,
                              named=named, unique_ids=repeats == 0)
        with Cleaner(meter, pool.parent, spill_dir) as cleaner:
            screen = cleaner.screen
            order = 0
            for record in records:
                if record.__class__ is Dropped:
                    yield record
                else:
                    yield screen(record, order)
                    order += 1
            cleaner.fill(report, order)


def _spooled(spool: Spool) -> Callable[[ParsedLine], None]:
    """Keep a parsed line in ``spool``: a tuple as it is, a Dropped as its four fields."""
    append = spool.append

    def keep(line: ParsedLine) -> None:
        append((line.where, line.reason, line.detail, line.id) if line.__class__ is Dropped else line)

    return keep


def _unspooled(lines: Iterator[tuple]) -> Iterator[ParsedLine]:
    """The parsed lines ``_spooled`` kept: a four-tuple is a Dropped again."""
    for line in lines:
        yield Dropped(*line) if len(line) == 4 else line


def _rebased(path: str, old_base: str, new_base: str) -> str:
    return os.path.relpath(os.path.join(old_base, path), new_base).replace(os.sep, "/")


def cleaned_line(admitted: Admitted, pool_dir: str, out_dir: str) -> str:
    """The cleaned pool line of one admitted item: paths rebased from ``pool_dir`` to ``out_dir``
    (both absolute)."""
    item = admitted.item
    source = {k: getattr(item.source, k) for k in SOURCE_FIELDS}
    if item.source.image is not None:
        source["image"] = _rebased(item.source.image, pool_dir, out_dir)
    fields = {
        "id": item.id,
        "image": _rebased(item.image.path, pool_dir, out_dir),
        "question": item.question,
        "answer": item.reference,
        "family": item.family,
        "options": item.options,
        "source": source,
    }
    return encode_pool_line(fields, extra={"clean": {"policy": admitted.policy, "actions": list(admitted.actions)}})


def _seal_cleaned(pool: Path, out: Path, images: Optional[ImagePolicy], digest: str) -> None:
    """Seal the cleaned pool ``out`` with the folders its input's images were admitted from, when
    one lies outside ``out``'s folder (see the module docstring); otherwise remove any old seal."""
    roots: list[str] = []
    if images is None or not images.allow_outside_paths:
        roots = [os.path.realpath(pool.parent), *sealed_roots(pool)]
    out_root = os.path.realpath(out.parent)
    write_seal(out, roots if any(not within(root, out_root) for root in roots) else (), digest)


def clean_pool(pool: Path, out: Path, *, dropped: Optional[Path] = None,
               images: Optional[ImagePolicy] = None, workers: int = 1) -> dict:
    """Clean ``pool`` into ``out`` (admitted items) and ``dropped`` (default: ``dropped.jsonl``
    beside ``out``); return the cleaning report with the line accounting. ``images`` bounds and
    confines the image files (default: inside the pool file's folder); ``workers`` > 1 reads and
    checks them on that many processes (``clean_lines``), with the same result.

    Both files are written under a temporary name and renamed when complete.
    """
    pool, out = Path(pool), Path(out)
    dropped = Path(dropped) if dropped is not None else WorkDir(out.parent).dropped
    if not pool.is_file():
        raise OrandCarError(f"{pool}: pool file not found")
    if os.path.abspath(out) == os.path.abspath(pool):
        raise OrandCarError(f"{out}: the cleaned pool must not overwrite its input; choose another file")
    out.parent.mkdir(parents=True, exist_ok=True)
    dropped.parent.mkdir(parents=True, exist_ok=True)

    report: dict = {}
    out_dir, pool_dir = os.path.abspath(out.parent), os.path.abspath(pool.parent)
    admitted = 0
    read_reasons: Counter = Counter()
    cleaned_drops: Counter = Counter()
    digest = hashlib.sha256()  # of the cleaned pool's bytes, for its seal
    # Both files are renamed into place only when every line is written (out first, then dropped).
    with JsonLinesFile(dropped, suffix=".partial") as dropped_file, replaced_on_success(out) as partial_out:
        with open(partial_out, "w", encoding="utf-8", newline="\n") as out_fh:
            for record in clean_lines(pool, report, images=images, workers=workers):
                if isinstance(record, Admitted):
                    text = cleaned_line(record, pool_dir, out_dir) + "\n"
                    out_fh.write(text)
                    digest.update(text.encode("utf-8"))
                    admitted += 1
                else:
                    dropped_file.write(record.to_dict())
                    (cleaned_drops if record.reason in DROP_REASONS else read_reasons)[record.reason] += 1

    _seal_cleaned(pool, out, images, digest.hexdigest())
    read_dropped = sum(read_reasons.values())
    report.setdefault("items", 0)
    report.update({
        "pool": str(pool),
        "out": str(out),
        "dropped_file": str(dropped),
        "lines": read_dropped + report["items"],
        "read_dropped": read_dropped,
        "read_dropped_by_reason": dict(sorted(read_reasons.items())),
        "lines_dropped": read_dropped + sum(cleaned_drops.values()),
        "lines_admitted": admitted,
    })
    if report["lines"] != report["lines_admitted"] + report["lines_dropped"]:
        raise RuntimeError(f"{pool}: line accounting does not add up: {report}")  # a bug, never bad input
    return report
