"""The cleaning policy: what admits or drops a pool item, and the policy id that names those rules.

``clean`` takes pool items in pool order and yields one ``Admitted`` or ``Dropped`` record per
item, in the same order. Rules, in the order they apply (the first that drops an item names it):

1. provenance (``clean/provenance.py``): the source's recorded image resolves to the attached
   image; else ``provenance_unresolved`` / ``provenance_mismatch``;
2. task purity (``clean/purity.py``): in a family whose mixed-collection items are off-task
   over the threshold, only benchmark QA is kept; else ``task_purity``;
3. multiple-choice normalisation (``clean/choices.py``): prose options become a lettered block
   and the reference a bare letter; else ``mc_unresolvable``; a blank or repeated option
   ``mc_bad_options``;
4. exact duplicates: a later item with the same image sha256, question and reference (after
   normalisation) as an admitted one is merged into it: ``duplicate_qa``, naming that item.

Purity needs every share measured before any decision, so ``clean`` reads all items first and
decides afterwards. It keeps the items (text, paths, hashes), never image bytes.

``report`` (a dict the caller passes) receives the measured figures: counts per reason and
action, provenance counts, the purity shares per family, and the number of merged duplicates.
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from dataclasses import replace
from hashlib import blake2b
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from ..records import Admitted, Dropped, PoolItem
from ..spill import SpillMap
from . import choices, provenance, purity

# Bumped whenever a cleaning rule changes what is admitted.
POLICY_ID = "orandcar-clean/0.4"
DUPLICATE = "duplicate_qa"
DROP_REASONS = (provenance.UNRESOLVED, provenance.MISMATCH, purity.REASON, choices.REASON, choices.BAD_OPTIONS,
                DUPLICATE)
ACTIONS = (provenance.UNCHECKED, choices.ACTION_NORMALISED, choices.ACTION_REFERENCE_LETTERED)


# json.dumps(..., ensure_ascii=False) with one encoder made once (dumps makes one per call).
_KEY_TEXT = json.JSONEncoder(ensure_ascii=False).encode


def qa_key(item: PoolItem) -> bytes:
    """What makes two QA items exact duplicates: image sha256, question, references (16-byte digest)."""
    text = _KEY_TEXT([item.image.sha256, item.question, item.references])
    return blake2b(text.encode("utf-8"), digest_size=16).digest()


class Cleaner:
    """The per-item decisions, once purity has been measured over the whole pool."""

    def __init__(self, meter: purity.PurityMeter, base_dir: Optional[Path], spill_dir=None):
        self.meter = meter
        self.hashes = provenance.SourceImageHashes(base_dir)
        # qa_key (hex) -> id of the admitted item it belongs to; on disk under spill_dir once large.
        self.kept = SpillMap(spill_dir)
        self.dropped: Counter = Counter()
        self.actions: Counter = Counter()
        self.provenance: Counter = Counter()
        self.admitted = 0

    def screen(self, item: PoolItem, order: int) -> Union[Admitted, Dropped]:
        """Admit ``item`` (possibly normalised) or drop it with the first rule's reason that applies."""
        actions: list[str] = []
        checked = provenance.check_provenance(item, self.hashes)
        if checked.reason is not None:
            return self._drop(item, checked.reason, checked.detail)
        self.provenance["checked" if checked.checked else "unchecked"] += 1
        if not checked.checked:
            actions.append(provenance.UNCHECKED)
        if self.meter.drops(item.family, item.source.origin):
            self.meter.families[item.family].dropped += 1
            return self._drop(item, purity.REASON, self.meter.detail(item.family))
        if choices.untouched(item.question, item.options):  # the common case, without a ChoiceResult
            return self._admit(item, order, actions)
        choice = choices.normalise_choices(item.question, item.reference, item.options)
        if choice.problem is not None:
            if item.options is None and item.family != choices.MC_FAMILY:
                # Options found in a free-text family's question that the reference does not
                # name: an ordinary question that reads like a list, not a multiple choice.
                choice = choices.ChoiceResult(item.question, item.reference, None)
            else:
                return self._drop(item, choice.reason, choice.problem)
        if choice.action is not None:
            actions.append(choice.action)
            item = replace(item, question=choice.question, reference=choice.reference, options=choice.options)
        return self._admit(item, order, actions)

    def _admit(self, item: PoolItem, order: int, actions: list[str]) -> Union[Admitted, Dropped]:
        """The last rule, exact duplicates: admit ``item`` unless an admitted one has its qa_key."""
        earlier = self.kept.first_seen(qa_key(item).hex(), item.id)
        if earlier is not None:
            return self._drop(item, DUPLICATE, f"same image, question and reference as {earlier!r}; merged into it")
        if actions:
            self.actions.update(actions)
        self.admitted += 1
        return Admitted(item=item, order=order, policy=POLICY_ID, actions=tuple(actions))

    def __enter__(self) -> "Cleaner":
        return self

    def __exit__(self, *exc_info) -> None:
        self.kept.close()

    def _drop(self, item: PoolItem, reason: str, detail: str) -> Dropped:
        self.dropped[reason] += 1
        if reason in (provenance.UNRESOLVED, provenance.MISMATCH):
            self.provenance[reason.removeprefix("provenance_")] += 1
        return Dropped(where=item.where, reason=reason, detail=detail, id=item.id)

    def fill(self, report: dict, items: int) -> None:
        report.update({
            "policy": POLICY_ID,
            "items": items,
            "admitted": self.admitted,
            "dropped": sum(self.dropped.values()),
            "dropped_by_reason": dict(sorted(self.dropped.items())),
            "actions": dict(sorted(self.actions.items())),
            "provenance": {k: self.provenance.get(k, 0) for k in ("checked", "unchecked", "unresolved", "mismatch")},
            "purity": self.meter.to_report(),
            "duplicates_merged": self.dropped.get(DUPLICATE, 0),
        })


def clean(
    items: Iterable[PoolItem],
    report: Optional[dict] = None,
    *,
    base_dir: Optional[Union[str, os.PathLike]] = None,
    meter: Optional[purity.PurityMeter] = None,
    spill_dir: Optional[Union[str, os.PathLike]] = None,
) -> Iterator[Union[Admitted, Dropped]]:
    """Yield exactly one ``Admitted`` or ``Dropped`` per item, in the order given.

    ``base_dir`` is the pool file's directory, against which ``source.image`` paths resolve;
    without it a relative ``source.image`` cannot be checked and its item counts as unchecked.
    Task purity needs a family's off-task share before it can decide any of its items: without
    ``meter`` the items are held until the last one is measured; with a ``meter`` that already
    measured them (``purity.measure_pool_file``), they stream through. The keys of the items
    admitted so far (for ``duplicate_qa``) go to scratch files under ``spill_dir`` (None: the
    system temp dir) once there are many. ``report`` is filled once the last record is yielded.
    """
    report = report if report is not None else {}
    report.setdefault("policy", POLICY_ID)
    if meter is not None:
        # The purity shares were measured beforehand (purity.measure_pool_file, a first pass over
        # the pool file): each item is decided as it comes, and none is held.
        with Cleaner(meter, Path(base_dir) if base_dir is not None else None, spill_dir) as cleaner:
            total = 0
            for item in items:
                yield cleaner.screen(item, total)
                total += 1
            cleaner.fill(report, total)
        return
    meter = purity.PurityMeter()
    pending: deque[PoolItem] = deque()
    for item in items:
        meter.measure(item.family, item.question, item.options, item.source.origin)
        pending.append(item)
    total = len(pending)
    with Cleaner(meter, Path(base_dir) if base_dir is not None else None, spill_dir) as cleaner:
        order = 0
        while pending:
            yield cleaner.screen(pending.popleft(), order)  # popped: a screened item is not held twice
            order += 1
        cleaner.fill(report, total)
