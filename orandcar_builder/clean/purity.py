"""Task purity: does a family's mixed-collection content ask for the family's task at all?

Mixed collections (InfinityMM and the like) assign samples to a family by image match, so a
scene-text family can receive "describe this picture" questions about its word crops. The
criterion is a task signature per family: regular expressions over the question as the model
will see it (its options block included). A question is on-task when it matches at least one of
the signature's ``requires`` patterns and none of its ``excludes`` patterns; otherwise it is
off-task. Patterns are matched case-insensitively.

The policy: for each family with a signature, the off-task share is measured over its items
whose ``source.origin`` is not ``"benchmark"``. A family whose share exceeds
``PURITY_THRESHOLD`` keeps only its genuine benchmark items; its mixed-collection items are all
dropped (``task_purity``), on-task or not, because the image match that brought them in is
what failed. A family without a signature is not checked. The same criterion is also run over
the benchmark items, which are on-task by definition: how often it calls them off-task is its
false-alarm rate, reported beside the share so the threshold can be judged against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Sequence

from ..prompts import has_lettered_block, option_block
from ..records import BENCHMARK_ORIGIN

REASON = "task_purity"
# Above this off-task share of its mixed-collection items, a family keeps only benchmark QA.
PURITY_THRESHOLD = 0.10


@dataclass(frozen=True)
class TaskSignature:
    """On-task means: matches one of ``requires`` and none of ``excludes`` (case-insensitive)."""

    requires: tuple[str, ...]
    excludes: tuple[str, ...] = ()


# Requests for open-ended description, captioning or composition: never the task of a family
# whose answers are checked against a short reference.
OPEN_ENDED = (
    r"\bdescrib\w*",
    r"\bdescription\b",
    r"\bcaption\w*",
    r"\bwhat(?:'s| is| are)\s+(?:happening|going on)\b",
    r"\bwhat do you (?:see|notice|observe)\b",
    r"\btell me (?:about|more)\b",
    r"\bexplain (?:the|this|what)\s+(?:\w+\s+)?(?:image|picture|photo|scene|figure)\b",
    r"\bsummari[sz]e\b",
    r"\b(?:write|compose|create)\s+(?:a|an|the)\s+(?:\w+\s+)?(?:story|poem|paragraph|essay|caption|post|description)\b",
    r"\bin detail\b",
    r"\bdetailed\b",
    r"\bimagine\b",
)
# Reading the text in the image.
READING = (
    r"\b(?:text|texts|written|writing|word|words|letters?|characters?|spell\w*|transcri\w*|ocr)\b",
    r"\b(?:read|reads|say|says|said|recogni[sz]e)\b",
)
# A question with a short answer: ends in '?', or opens with a question word or a request verb.
QUESTION_FORM = (
    r"\?\s*$",
    r"^\s*(?:what|which|who|whom|whose|when|where|why|how|is|are|was|were|do|does|did|can|could|"
    r"should|will|would|has|have|had|name|list|give|find|identify|extract|provide|state|determine|"
    r"count|according|in which|on which|from which|at which)\b",
)
# Calculation or geometry.
MATH = (
    r"\d",
    r"[=+×÷^<>√∠π]",
    r"\\(?:frac|sqrt|angle|pi|times|cdot|le|ge)\b",
    r"\b(?:solve|calculate|compute|evaluate|simplify|how (?:many|much|long|far)|value|equation|"
    r"angle|area|perimeter|volume|probability|sum|product|ratio|percent\w*|total|average|mean|"
    r"degrees?|radius|diameter|length|triangle|circle|square|rectangle|function|graph|slope|"
    r"integer|number|proof|prove)\b",
)
# Choosing among given options.
CHOICE = (
    r"^\s*\(?[A-Z][.)]\s+\S",
    r"\(\s*[A-Da-d]\s*\)",
    r"\b(?:options|choices)\s*:",
    r"\b(?:choose|select|pick)\b",
    r"\bwhich (?:one )?of the following\b",
)

TASK_SIGNATURES: dict[str, TaskSignature] = {
    "scene_text": TaskSignature(requires=READING, excludes=OPEN_ENDED),
    "doc_vqa": TaskSignature(requires=QUESTION_FORM, excludes=OPEN_ENDED),
    "chart_qa": TaskSignature(requires=QUESTION_FORM, excludes=OPEN_ENDED),
    "vqa": TaskSignature(requires=QUESTION_FORM, excludes=OPEN_ENDED),
    "math": TaskSignature(requires=MATH, excludes=OPEN_ENDED),
    "multiple_choice": TaskSignature(requires=CHOICE, excludes=OPEN_ENDED),
    # "generic" has no signature: any question is its task.
}


@lru_cache(maxsize=None)
def _compiled(patterns: tuple[str, ...]) -> Optional[re.Pattern]:
    """The patterns as one alternation: it matches somewhere exactly when one of them does (none
    refers to a group by number), in one scan of the text. None for no patterns."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE | re.MULTILINE)


def posed_question(question: str, options: Optional[Sequence[str]] = None) -> str:
    """The question as the model will see it, before the family instruction: options included."""
    if options and not has_lettered_block(question):
        return f"{question.rstrip()}\n{option_block(options)}"
    return question


# id(signature) -> (signature, its requires, its excludes): looked up per question without hashing
# the pattern tuples; the entry holds the signature, so its id is not reused while it is there.
_SIGNATURES: dict[int, tuple] = {}


def _patterns(signature: TaskSignature) -> tuple:
    entry = _SIGNATURES.get(id(signature))
    if entry is None or entry[0] is not signature:
        entry = _SIGNATURES[id(signature)] = (signature, _compiled(signature.requires), _compiled(signature.excludes))
    return entry


def is_on_task(question: str, signature: TaskSignature) -> bool:
    """The criterion: some ``requires`` pattern matches and no ``excludes`` pattern does."""
    _, requires, excludes = _patterns(signature)
    if requires is None or requires.search(question) is None:
        return False
    return excludes is None or excludes.search(question) is None


def off_task(family: str, question: str, options: Optional[Sequence[str]] = None) -> Optional[bool]:
    """True when the question is off-task for ``family``; None when the family has no signature."""
    signature = TASK_SIGNATURES.get(family)
    if signature is None:
        return None
    return not is_on_task(posed_question(question, options), signature)


@dataclass
class FamilyPurity:
    """Counts for one family; ``share`` is measured over mixed-collection items only."""

    mixed: int = 0
    mixed_off_task: int = 0
    benchmark: int = 0
    benchmark_off_task: int = 0  # the criterion's false alarms: benchmark QA is on-task by definition
    dropped: int = 0

    @property
    def share(self) -> Optional[float]:
        return self.mixed_off_task / self.mixed if self.mixed else None

    @property
    def over_threshold(self) -> bool:
        return self.share is not None and self.share > PURITY_THRESHOLD

    def to_dict(self) -> dict:
        return {
            "mixed": self.mixed,
            "mixed_off_task": self.mixed_off_task,
            "off_task_share": None if self.share is None else round(self.share, 6),
            "benchmark": self.benchmark,
            "benchmark_off_task": self.benchmark_off_task,
            "over_threshold": self.over_threshold,
            "dropped": self.dropped,
        }


class PurityMeter:
    """Measures off-task shares per family as items go by, then decides which items purity drops."""

    def __init__(self) -> None:
        self.families: dict[str, FamilyPurity] = {}

    def measure(self, family: str, question: str, options: Optional[Sequence[str]], origin: str) -> None:
        flagged = off_task(family, question, options)
        if flagged is None:
            return
        counts = self.families.setdefault(family, FamilyPurity())
        if origin == BENCHMARK_ORIGIN:
            counts.benchmark += 1
            counts.benchmark_off_task += flagged
        else:
            counts.mixed += 1
            counts.mixed_off_task += flagged

    def drops(self, family: str, origin: str) -> bool:
        """True when purity drops an item of ``family`` from ``origin`` (call after measuring all)."""
        counts = self.families.get(family)
        return origin != BENCHMARK_ORIGIN and counts is not None and counts.over_threshold

    def detail(self, family: str) -> str:
        counts = self.families[family]
        return (f"family {family!r}: {counts.mixed_off_task} of {counts.mixed} mixed-collection items are off-task "
                f"({counts.share:.1%} > threshold {PURITY_THRESHOLD:.0%}); only benchmark QA is kept")

    def to_report(self) -> dict:
        return {
            "threshold": PURITY_THRESHOLD,
            "families": {name: counts.to_dict() for name, counts in sorted(self.families.items())},
        }


def measure_pool_file(path, *, limit: Optional[int] = None, spill_dir=None, families=None) -> PurityMeter:
    """A first pass over a pool file that measures the purity shares from its lines alone (no image
    is read), so that ``clean(..., meter=...)`` can then decide items as they stream.

    It measures the lines ``read_pool`` would turn into items, except that a line whose image turns
    out missing or undecodable on the second pass is still counted: it is an item of its family all
    the same. Malformed lines and repeated ids are skipped, as ``read_pool`` drops them; the ids
    seen are kept in a SpillSet (scratch file under ``spill_dir`` past its threshold), so memory
    does not grow with the pool. ``families``: the registry whose families read_pool admits (None:
    the code's).
    """
    from itertools import islice

    from ..pool.jsonl import decode_json_lines, parsed_lines

    if limit is not None and limit < 0:
        limit = 0  # no line is measured (read_pool refuses such a limit)
    return measure_lines(parsed_lines(islice(decode_json_lines(path), limit), families), spill_dir=spill_dir)[0]


def measure_lines(lines, *, spill_dir=None, keep=None) -> tuple[PurityMeter, int]:
    """``measure_pool_file`` over parsed pool lines (``pool.jsonl.parsed_lines``): the meter, and
    how many of the lines that parsed repeat an earlier one's id (0: every id is unique). Each
    line is also given to ``keep`` when given (``clean_lines`` keeps them for its second pass)."""
    from ..records import Dropped
    from ..spill import SpillSet

    meter = PurityMeter()
    measure = meter.measure
    repeats = 0
    with SpillSet(spill_dir) as seen:
        add = seen.add
        for line in lines:
            if keep is not None:
                keep(line)
            if line.__class__ is Dropped:
                continue
            # (where, id, image, question, answer, family, options, source): pool.jsonl.FIELDS
            if add(line[1]):
                source = line[7]
                measure(line[5], line[3], line[6],
                        source.get("origin", BENCHMARK_ORIGIN) if source is not None else BENCHMARK_ORIGIN)
            else:
                repeats += 1
    return meter, repeats
