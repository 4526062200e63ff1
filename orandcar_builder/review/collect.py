"""What the review page shows, gathered from a build's work dir in one pass over its decisions.

``work/decisions.parquet`` is read batch by batch (only the columns needed; never the raw text or
the rendered prompt), so memory holds one batch, the per-family counters, two length histograms
and the sampled rows, whatever the build's size. Samples are a fixed choice: per family and kind
(accepted, promoted, rejected for each reason, failed), the items with the smallest
``sample_key`` (a salted sha256 of the item id), so the same build always shows the same items and
a rebuilt pool shows the items it kept.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import OrandCarError
from ..figures import BuildFigures
from ..files import read_json_lines
from ..parquetio import open_parquet
from ..records import DECISION_SCHEMA
from ..vocab import ACCEPTED, FAILED, FINISH_LENGTH, JUDGE_VERIFIER, REJECTED
from ..workdir import WorkDir
from .charts import FamilyCounts, LengthHistogram

SAMPLE_SALT = "orandcar-review-sample"
SAMPLES_PER_KIND = 3  # items shown per family for each kind (accepted, promoted, each rejection reason)
PROMOTED_LISTED_MAX = 500  # the judge's promotions listed one per line; more are counted, not listed
DROPPED_EXAMPLES_PER_REASON = 3
READ_BATCH_ROWS = 4096  # decisions read at a time: long reasoning texts make rows large

ACCEPTED_KIND = "accepted"
PROMOTED_KIND = "promoted"
FAILED_KIND = "failed"
REJECTED_KIND_PREFIX = "rejected: "

# Columns of decisions.parquet never read: the raw output (reasoning + answer, both read apart)
# and the rendered model input (the chat template around ``question``).
_SKIPPED_COLUMNS = ("text", "prompt")
_COMPACT = ("id", "family", "route", "reason", "verifier")
# Columns the item card shows under their own labels; any other column the decisions hold (e.g.
# an answer extraction recorded by a newer build) is listed under "other recorded fields".
KNOWN_COLUMNS = frozenset(DECISION_SCHEMA.names)
# Columns an earlier builder wrote under another name, read under today's (a work dir built before
# the rename still reviews).
LEGACY_COLUMNS = {"model_answer": "final_answer"}


class ReviewError(OrandCarError):
    pass


def sample_key(item_id: str) -> str:
    return hashlib.sha256(f"{SAMPLE_SALT}\0{item_id}".encode("utf-8")).hexdigest()


def kind_of(route: Optional[str], reason: Optional[str], verifier: Optional[str]) -> str:
    if route == ACCEPTED:
        return PROMOTED_KIND if verifier == JUDGE_VERIFIER else ACCEPTED_KIND
    if route == REJECTED:
        return REJECTED_KIND_PREFIX + (reason or "unknown")
    return FAILED_KIND


@dataclass
class LengthStats:
    """A streaming histogram of text lengths (characters) in power-of-two bins."""

    label: str
    complete: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    n: int = 0
    n_truncated: int = 0
    total_chars: int = 0
    longest: int = 0

    def add(self, lengths: np.ndarray, truncated: np.ndarray) -> None:
        if not len(lengths):
            return
        bins = np.frexp(lengths.astype(np.float64))[1]  # 0 for 0, else the bit length of the length
        for target, mask in (("complete", ~truncated), ("truncated", truncated)):
            counts = np.bincount(bins[mask], minlength=1)
            have = getattr(self, target)
            if len(counts) > len(have):
                have = np.concatenate([have, np.zeros(len(counts) - len(have), dtype=np.int64)])
            have[:len(counts)] += counts
            setattr(self, target, have)
        self.n += len(lengths)
        self.n_truncated += int(truncated.sum())
        self.total_chars += int(lengths.sum())
        self.longest = max(self.longest, int(lengths.max()))

    @property
    def mean(self) -> Optional[float]:
        return self.total_chars / self.n if self.n else None

    def histogram(self) -> LengthHistogram:
        """The counts per bin (the two lists may differ in length; the chart pads the shorter)."""
        return LengthHistogram(self.label, [int(x) for x in self.complete], [int(x) for x in self.truncated])


@dataclass
class Sampled:
    key: str
    row: dict


@dataclass
class Collected:
    """Everything the page shows that comes from the decisions (see ``collect``)."""

    counts: dict[str, Counter] = field(default_factory=dict)  # family -> kind -> n
    samples: dict[tuple[str, str], list[Sampled]] = field(default_factory=dict)
    promoted: list[dict] = field(default_factory=list)
    promoted_total: int = 0
    reasoning: LengthStats = field(default_factory=lambda: LengthStats("reasoning"))
    final_answer: LengthStats = field(default_factory=lambda: LengthStats("final answer"))
    no_generation: int = 0  # failed, or the engine could not answer at all: no lengths
    wanted: dict[str, dict] = field(default_factory=dict)  # item id -> row, for ids asked for by name
    extra_columns: list[str] = field(default_factory=list)
    rows: int = 0

    def family_counts(self) -> list[FamilyCounts]:
        out = []
        for family, kinds in sorted(self.counts.items()):
            reasons = {k[len(REJECTED_KIND_PREFIX):]: n for k, n in sorted(kinds.items())
                       if k.startswith(REJECTED_KIND_PREFIX)}
            out.append(FamilyCounts(family=family, accepted_by_rule=kinds[ACCEPTED_KIND],
                                    promoted=kinds[PROMOTED_KIND], rejected=sum(reasons.values()),
                                    failed=kinds[FAILED_KIND], rejected_by_reason=reasons))
        return out

    def family_samples(self, family: str) -> list[tuple[str, list[dict]]]:
        """(kind, rows) of one family: accepted, promoted, each rejection reason, failed."""
        kinds = sorted((k for f, k in self.samples if f == family), key=_kind_order)
        return [(k, [s.row for s in self.samples[(family, k)]]) for k in kinds]


def _kind_order(kind: str) -> tuple:
    rank = {ACCEPTED_KIND: 0, PROMOTED_KIND: 1, FAILED_KIND: 3}.get(kind, 2)
    return rank, kind


def collect(decisions: Path, *, per_kind: int = SAMPLES_PER_KIND, promoted_max: int = PROMOTED_LISTED_MAX,
            wanted_ids: frozenset = frozenset(), batch_rows: int = READ_BATCH_ROWS) -> Collected:
    """Counts per family and kind, length histograms, the sampled rows, the judge's promotions
    (the first ``promoted_max`` in pool order, with the total) and the rows of ``wanted_ids``."""
    try:
        parquet = open_parquet(decisions)
    except (OSError, pa.ArrowException) as exc:
        raise ReviewError(f"{decisions}: cannot read the build's decisions ({exc}); "
                          f"run `orandcar build` with this work dir first") from None
    stored = parquet.schema_arrow.names
    renames = {old: new for old, new in LEGACY_COLUMNS.items() if old in stored and new not in stored}
    names = [renames.get(name, name) for name in stored]
    missing = [c for c in _COMPACT + ("think", "final_answer", "finish_reason", "unsupported") if c not in names]
    if missing:
        raise ReviewError(f"{decisions}: not a decisions file of this builder (no column {', '.join(missing)})")
    columns = [c for c in stored if c not in _SKIPPED_COLUMNS]
    out = Collected(extra_columns=[c for c in names if c not in KNOWN_COLUMNS])
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=columns):
        if renames:
            batch = batch.rename_columns([renames.get(name, name) for name in batch.schema.names])
        _add_batch(out, batch, per_kind, promoted_max, wanted_ids)
    return out


def _add_batch(out: Collected, batch: pa.RecordBatch, per_kind: int, promoted_max: int, wanted_ids) -> None:
    compact = {name: batch.column(name).to_pylist() for name in _COMPACT}
    out.rows += batch.num_rows
    candidates: dict[tuple[str, str], list[tuple[str, int]]] = {}
    take: dict[int, None] = {}
    promoted_rows: list[int] = []
    wanted_rows: list[int] = []
    for i, (item_id, family, route, reason, verifier) in enumerate(zip(*compact.values())):
        kind = kind_of(route, reason, verifier)
        out.counts.setdefault(family, Counter())[kind] += 1
        candidates.setdefault((family, kind), []).append((sample_key(item_id), i))
        if kind == PROMOTED_KIND:
            out.promoted_total += 1
            if len(out.promoted) + len(promoted_rows) < promoted_max:
                promoted_rows.append(i)
        if item_id in wanted_ids:
            wanted_rows.append(i)
    chosen: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for bucket, keyed in candidates.items():
        keyed.sort()
        have = out.samples.get(bucket, [])
        bound = have[-1].key if len(have) >= per_kind else None
        picked = [(k, i) for k, i in keyed[:per_kind] if bound is None or k < bound]
        if picked:
            chosen[bucket] = picked
            take.update((i, None) for _, i in picked)
    take.update((i, None) for i in promoted_rows + wanted_rows)
    rows = dict(zip(take, batch.take(pa.array(list(take), type=pa.int64())).to_pylist())) if take else {}
    for bucket, picked in chosen.items():
        merged = out.samples.get(bucket, []) + [Sampled(k, rows[i]) for k, i in picked]
        merged.sort(key=lambda s: s.key)
        out.samples[bucket] = merged[:per_kind]
    out.promoted.extend(rows[i] for i in promoted_rows)
    for i in wanted_rows:
        out.wanted[compact["id"][i]] = rows[i]
    _add_lengths(out, batch)


def _add_lengths(out: Collected, batch: pa.RecordBatch) -> None:
    """Lengths of the replies that exist: not failed items, not ones the engine could not answer."""
    answered = pc.and_(pc.not_equal(batch.column("route"), FAILED), pc.is_null(batch.column("unsupported")))
    answered = pc.fill_null(answered, False)
    out.no_generation += batch.num_rows - pc.sum(answered).as_py() if batch.num_rows else 0
    if not pc.any(answered).as_py():
        return
    truncated = pc.fill_null(pc.equal(pc.filter(batch.column("finish_reason"), answered), FINISH_LENGTH), False)
    truncated = truncated.to_numpy(zero_copy_only=False)
    for stats, column in ((out.reasoning, "think"), (out.final_answer, "final_answer")):
        lengths = pc.fill_null(pc.utf8_length(pc.filter(batch.column(column), answered)), 0)
        stats.add(lengths.to_numpy(zero_copy_only=False).astype(np.int64), truncated.astype(bool))


# --- the other work-dir files -------------------------------------------------------------------


def read_figures(path: Path) -> BuildFigures:
    """The build's figures from its work/report.json."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReviewError(f"{path}: no build report; run `orandcar build` with this work dir first") from None
    except (OSError, ValueError) as exc:
        raise ReviewError(f"{path}: cannot read the build report ({exc})") from None
    if not isinstance(data, dict):
        raise ReviewError(f"{path}: the build report is not a JSON object")
    return BuildFigures.from_json(data)


@dataclass
class DroppedSummary:
    examples: dict[str, list[dict]] = field(default_factory=dict)  # reason -> first few records
    counts: Counter = field(default_factory=Counter)
    unreadable_lines: int = 0


def dropped_examples(path: Path, per_reason: int = DROPPED_EXAMPLES_PER_REASON) -> DroppedSummary:
    """The first few dropped items of each reason (``work/dropped.jsonl``), and the counts."""
    out = DroppedSummary()
    for record in read_json_lines(path):
        if record is None:
            out.unreadable_lines += 1
            continue
        reason = str(record.get("reason") or "unknown")
        out.counts[reason] += 1
        shown = out.examples.setdefault(reason, [])
        if len(shown) < per_reason:
            shown.append(record)
    out.examples = dict(sorted(out.examples.items()))
    return out


def wanted_ids(calibration: Optional[dict]) -> frozenset:
    """The item ids whose rows the page shows by name: the calibration's disagreements."""
    return frozenset(str(d.get("id")) for d in (calibration or {}).get("disagreements") or [])


def calibration_of(figures: BuildFigures, work: WorkDir) -> tuple[Optional[dict], Optional[str]]:
    """The judge's calibration and where it came from: the build's figures, else the file
    ``orandcar calibrate`` writes (``work/calibration.json``)."""
    calibration = figures.judge.calibration if figures.judge is not None else None
    if calibration:
        return calibration, "the build (report.json)"
    path = WorkDir(work).calibration
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReviewError(f"{path}: cannot read the calibration ({exc})") from None
        if isinstance(data, dict):
            return data, "orandcar calibrate (calibration.json)"
    return None, None
