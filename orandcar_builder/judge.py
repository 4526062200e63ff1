"""Model-as-judge: the text-only second pass over answers the string rule rejected.

The judge is shown the question, the reference(s) and the candidate's final answer, never the
image nor the candidate's reasoning, and is asked to compare, not to solve. Only a CORRECT
verdict promotes an item; WRONG and UNSURE stay rejected, and a reply that cannot be read is
UNSURE (counted as ``judge_unparseable``). Calibration runs the judge over items the rule had
already accepted and reports how often the two agree.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence, Union

from .engines.base import Engine
from .errors import OrandCarError
from .records import Decision, Generation, Request, Verdict
from .verify.candidates import strip_reasoning

CORRECT, WRONG, UNSURE = "CORRECT", "WRONG", "UNSURE"
LABELS = (CORRECT, WRONG, UNSURE)

JUDGE_FAMILY = "judge"  # Request.family of every judge request
JUDGE_VERIFIER = "judge"  # qa.verifier of an item the judge promoted
ROUTE_ACCEPTED, ROUTE_REJECTED = "accepted", "rejected"
REASON_WRONG, REASON_UNSURE = "wrong_answer", "unsure"

JUDGE_PROMPT_VERSION = "1"
VERDICT_PARSER_VERSION = "1"  # a change in how replies are read changes verdicts: bump it

JUDGE_PROMPT_TEMPLATE = """\
You are checking a candidate answer against a reference answer.

Your only task is to compare the two. Do not solve the question yourself and do not use your own \
knowledge to decide what is true: a candidate that disagrees with the reference is WRONG even if \
you believe it is right. The question was asked about an image that you are not shown; you do not \
need it to compare the answers.

Reply CORRECT when the candidate gives the same answer as the reference (or as any one of the \
references, when several are given). Differences of letter case, spacing, punctuation, formatting \
or wording that keep the meaning do not matter, nor does an explanation added to the right answer.
Reply WRONG when the candidate gives a different answer, only part of the answer, several \
conflicting answers, or no answer at all. Numbers must agree in value: 0.5 and 1/2 agree, \
12 and 12.5 do not, and neither do answers that differ in sign, exponent or denominator.
Reply UNSURE only when the reference itself is unusable (empty, garbled or self-contradictory) or \
too ambiguous to compare against. Never reply UNSURE because the question is hard.

<question>
{question}
</question>

{references}

<candidate>
{candidate}
</candidate>

You may justify your decision in a sentence or two. The last line of your reply must be exactly \
one of "Verdict: CORRECT", "Verdict: WRONG" or "Verdict: UNSURE"."""

REFERENCE_BLOCK = "<reference>\n{reference}\n</reference>"


def judge_prompt(question: str, references: Union[str, Sequence[str]], candidate: str) -> str:
    """The exact text the judge receives: the template with the question, every reference (one
    block each) and the candidate inserted verbatim. Braces in the inserted texts are kept as is."""
    refs = [references] if isinstance(references, str) else list(references)
    blocks = "\n".join(REFERENCE_BLOCK.format(reference=ref) for ref in refs or [""])
    return JUDGE_PROMPT_TEMPLATE.format(question=question, references=blocks, candidate=candidate)


# --- reading the judge's reply -------------------------------------------------------------

_AMBIGUOUS = "AMBIGUOUS"  # a qualified or doubly negated verdict word: never a verdict
_MARKUP = re.compile(r"[*_`~]")
_LATEX_WRAPPER = re.compile(r"\\(?:boxed|text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}")
_LINE_LEAD = re.compile(r"^[\s#>|\-•–—]*(?:\d+[.)]\s+)?")  # headings, quotes, bullets, numbering
_VERDICT_WORD = re.compile(
    r"(?P<neg>\bnot\s+|n['’]t\s+)?"
    r"(?P<qual>\b(?:quite|entirely|fully|completely|totally|exactly|partially|partly|mostly"
    r"|almost|largely|nearly|somewhat|half)\s+)?"
    r"\b(?P<word>incorrect|correct|wrong|unsure)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(?:not|no|never|neither|nor|cannot)\b|n['’]t\b", re.IGNORECASE)
_VERDICT_KEY = re.compile(
    r"^(?:(?:so|thus|hence|therefore|overall|my|the)\b[\s,]*)*"
    r"(?:(?:final|overall)\s+)?"
    r"(?:verdict|judge?ment|decision|grade|label|evaluation|assessment|conclusion|answer)\b"
    r"\s*(?P<sep>[:=\-–—]|\bis\b)?\s*(?P<rest>.*)$",
    re.IGNORECASE,
)
_STANDALONE = re.compile(r"^(?:not\s+)?(?:correct|incorrect|wrong|unsure)$", re.IGNORECASE)


def reply_after_reasoning(reply: str) -> str:
    """The part of a judge reply after its reasoning: closed ``<think>`` blocks and everything up
    to a stray ``</think>`` are removed; a ``<think>`` that never closes hides the rest."""
    text = strip_reasoning(reply)
    return text.split("<think>", 1)[0]


def _clean_line(line: str) -> str:
    line = _LATEX_WRAPPER.sub(r"\1", line)
    line = _MARKUP.sub("", line)
    return _LINE_LEAD.sub("", line).strip()


def _word_label(match: re.Match) -> str:
    word = match.group("word").lower()
    negated, qualified = bool(match.group("neg")), bool(match.group("qual"))
    if word == "correct":
        if qualified:  # "partially correct", "not entirely correct"
            return _AMBIGUOUS
        return WRONG if negated else CORRECT
    if negated or qualified:  # "not wrong", "not incorrect", "partly wrong", "not unsure"
        return _AMBIGUOUS
    return UNSURE if word == "unsure" else WRONG


def _fragment_label(fragment: str) -> Optional[str]:
    """The verdict a fragment states: a label, ``_AMBIGUOUS`` when it states two different ones,
    a qualified one or a negation that is not part of the verdict, or None when it states none."""
    fragment = re.sub(r"^[^A-Za-z]+", "", fragment)
    matches = list(_VERDICT_WORD.finditer(fragment))
    if not matches:
        return None
    labels = {_word_label(m) for m in matches}
    if len(labels) != 1 or _AMBIGUOUS in labels:
        return _AMBIGUOUS
    leading = matches[0].start() == 0
    negations = len(_NEGATION.findall(fragment))
    if not leading and negations > sum(1 for m in matches if m.group("neg")):
        return _AMBIGUOUS  # "not the correct one": the negation is elsewhere in the sentence
    return labels.pop()


def _standalone_label(line: str) -> Optional[str]:
    bare = re.sub(r"^[^A-Za-z]+|[^A-Za-z]+$", "", line)
    bare = re.sub(r"\s+", " ", bare)
    return _fragment_label(bare) if _STANDALONE.match(bare) else None


def _line_verdict(lines: list[str], i: int) -> Optional[str]:
    """The verdict line ``i`` states as a verdict line ("Verdict: X", a heading "Verdict" whose
    next line states it, or a line holding only a verdict word), or None when it is no such line."""
    line = lines[i]
    standalone = _standalone_label(line)
    if standalone is not None:
        return standalone
    key = _VERDICT_KEY.match(line)
    if key is None:
        return None
    rest = key.group("rest")
    if rest and not key.group("sep"):
        return None  # "answer the question ..." is prose, not a verdict line
    if rest:
        return _fragment_label(rest)
    if i + 1 < len(lines):  # a heading; the verdict follows on the next line
        return _fragment_label(lines[i + 1])
    return None


def _trailing_label(line: str) -> Optional[str]:
    """A verdict word that ends a sentence ("..., so the candidate is correct.")."""
    bare = re.sub(r"[^A-Za-z]+$", "", line)
    matches = list(_VERDICT_WORD.finditer(bare))
    if not matches or matches[-1].end() != len(bare):
        return None
    return _fragment_label(bare)


def parse_verdict(reply: str) -> tuple[str, bool]:
    """Read the judge's verdict from its raw reply: ``(label, parseable)``.

    The verdict is read after any reasoning block, from the last verdict line ("Verdict: X",
    "**Final answer: X**", a line holding only the verdict word); failing that, from a verdict word
    ending the last line. "not correct" and "incorrect" are WRONG; case, markdown emphasis and
    trailing punctuation do not matter. A reply with two different verdicts on its final verdict
    line (or on two verdict lines in a row), a qualified verdict ("partially correct") or none at
    all is ``(UNSURE, False)``; this function never raises.
    """
    lines = [c for c in (_clean_line(raw) for raw in reply_after_reasoning(reply).splitlines()) if c]
    if not lines:
        return UNSURE, False
    label: Optional[str] = None
    for i in range(len(lines) - 1, -1, -1):
        label = _line_verdict(lines, i)
        if label is not None:
            previous = _line_verdict(lines, i - 1) if i > 0 else None
            if previous is not None and previous != label:
                label = _AMBIGUOUS  # "Verdict: CORRECT / Verdict: WRONG": an echo of the options
            break
    if label is None:
        label = _trailing_label(lines[-1])
    if label in LABELS:
        return label, True
    return UNSURE, False


# --- running the judge --------------------------------------------------------------------


@dataclass(frozen=True)
class JudgeVerdict(Verdict):
    """A Verdict that also says whether the reply could be read; unparseable replies are UNSURE."""

    parseable: bool = True


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge. ``candidate`` is the model's whole final answer (see
    ``candidate_answer``); ``family`` is used by calibration to stratify and by reports."""

    item_id: str
    question: str
    references: tuple[str, ...]
    candidate: str
    family: str = ""


JudgeItemLike = Union[JudgeItem, Sequence]
GenerateFn = Callable[[Engine, Sequence[Request]], Sequence[Generation]]


def as_judge_item(item: JudgeItemLike) -> JudgeItem:
    """A JudgeItem from itself or from ``(item_id, question, references, candidate[, family])``."""
    if isinstance(item, JudgeItem):
        return item
    if isinstance(item, (tuple, list)) and len(item) in (4, 5):
        item_id, question, references, candidate, *family = item
        refs = (references,) if isinstance(references, str) else tuple(references)
        return JudgeItem(str(item_id), question, refs, candidate, *family)
    raise TypeError(
        f"judge item {item!r}: expected a JudgeItem or (item_id, question, references, candidate"
        "[, family])"
    )


def candidate_answer(generation: Generation) -> str:
    """The text the judge grades and, when promoted, the stored answer: the model's final answer
    with any leaked reasoning removed, stripped. Never includes the ``think`` part."""
    return strip_reasoning(generation.answer).strip()


def needs_judge(generation: Generation, decision: Decision) -> bool:
    """Whether an answer goes to the judge: the rule rejected it, the engine could answer the
    request at all, and there is a non-empty final answer to grade."""
    return not decision.passed and generation.unsupported is None and bool(candidate_answer(generation))


def judge_request(item: JudgeItemLike) -> Request:
    """The text-only request for one item: the judge prompt as question, no image."""
    item = as_judge_item(item)
    prompt = judge_prompt(item.question, item.references, item.candidate)
    return Request(item_id=item.item_id, question=prompt, family=JUDGE_FAMILY, image=None)


def verdict_from_generation(generation: Generation) -> JudgeVerdict:
    """The verdict a judge generation states. A reply the engine could not give or that ran out
    of tokens is UNSURE and unparseable, whatever words its unfinished text contains."""
    raw = generation.text
    if generation.unsupported is not None or generation.finish_reason == "length":
        return JudgeVerdict(UNSURE, raw, generation.model, parseable=False)
    label, parseable = parse_verdict(raw)
    return JudgeVerdict(label, raw, generation.model, parseable=parseable)


def _engine_generate(engine: Engine, requests: Sequence[Request]) -> Sequence[Generation]:
    return engine.generate(requests)


def judge(
    engine: Engine, items: Iterable[JudgeItemLike], generate: Optional[GenerateFn] = None
) -> list[JudgeVerdict]:
    """One verdict per item, in order. ``generate(engine, requests)`` runs the requests (default:
    ``engine.generate``; the build passes its cached generate). Raises OrandCarError when the
    engine cannot judge or returns generations that do not match the requests."""
    judged = [as_judge_item(item) for item in items]
    if not judged:
        return []
    if not getattr(engine, "can_judge", False):
        raise OrandCarError(
            f"engine {getattr(engine, 'kind', engine)!r} cannot run the text-only judge: use a "
            "vllm, openai_compat or replay judge, or --judge none to skip the second pass"
        )
    requests = [judge_request(item) for item in judged]
    generations = list((generate or _engine_generate)(engine, requests))
    if len(generations) != len(requests):
        raise OrandCarError(
            f"judge engine {engine.kind!r} returned {len(generations)} replies for "
            f"{len(requests)} requests"
        )
    for request, generation in zip(requests, generations):
        if generation.item_id != request.item_id:
            raise OrandCarError(
                f"judge engine {engine.kind!r} answered {generation.item_id!r} where "
                f"{request.item_id!r} was asked: replies must come in request order"
            )
    return [verdict_from_generation(g) for g in generations]


def promotion(verdict: Union[Verdict, str]) -> tuple[str, Optional[str]]:
    """Where a judged item goes, as ``(route, reason)``: only CORRECT is accepted; WRONG is
    rejected as ``wrong_answer`` and anything else (UNSURE, unparseable, an unknown label) as
    ``unsure``. A verdict may be given as its label."""
    label = verdict if isinstance(verdict, str) else verdict.label
    if label == CORRECT:
        return ROUTE_ACCEPTED, None
    if label == WRONG:
        return ROUTE_REJECTED, REASON_WRONG
    return ROUTE_REJECTED, REASON_UNSURE


# --- calibration --------------------------------------------------------------------------

CALIBRATION_SAMPLE_SALT = "orandcar-judge-calibration"


def sample_key(item_id: str) -> str:
    """The hash that orders items within a family for the calibration sample."""
    return hashlib.sha256(f"{CALIBRATION_SAMPLE_SALT}\0{item_id}".encode("utf-8")).hexdigest()


def calibration_sample(items: Iterable[JudgeItemLike], n: int) -> list[JudgeItem]:
    """At most ``n`` items, spread across families: families (by name) take turns giving their
    next item in ``sample_key`` order until ``n`` are drawn or all are used. Depends only on the
    set of items, not their order; a larger ``n`` extends the sample of a smaller one."""
    if n < 0:
        raise ValueError(f"calibration sample size must be >= 0, got {n}")
    by_family: dict[str, list[JudgeItem]] = {}
    seen: set[str] = set()
    for raw in items:
        item = as_judge_item(raw)
        if item.item_id not in seen:
            seen.add(item.item_id)
            by_family.setdefault(item.family, []).append(item)
    queues = [sorted(group, key=lambda it: sample_key(it.item_id)) for _, group in sorted(by_family.items())]
    sample: list[JudgeItem] = []
    depth = 0
    while len(sample) < n and any(depth < len(q) for q in queues):
        for queue in queues:
            if depth < len(queue) and len(sample) < n:
                sample.append(queue[depth])
        depth += 1
    return sample


@dataclass(frozen=True)
class CalibrationRow:
    """One rule-accepted item and the judge's verdict on it."""

    item: JudgeItem
    verdict: JudgeVerdict

    @property
    def agrees(self) -> bool:
        return self.verdict.label == CORRECT

    def to_dict(self) -> dict:
        return {
            "id": self.item.item_id,
            "family": self.item.family,
            "question": self.item.question,
            "references": list(self.item.references),
            "candidate": self.item.candidate,
            "verdict": self.verdict.label,
            "parseable": self.verdict.parseable,
            "judge_reply": self.verdict.raw,
        }


@dataclass(frozen=True)
class CalibrationReport:
    """Agreement of the judge with the string rule on items the rule accepted."""

    requested: int
    rows: tuple[CalibrationRow, ...]

    @property
    def n(self) -> int:
        return len(self.rows)

    @property
    def agreed(self) -> int:
        return sum(row.agrees for row in self.rows)

    @property
    def agreement(self) -> Optional[float]:
        return round(self.agreed / self.n, 4) if self.n else None

    @property
    def disagreements(self) -> list[CalibrationRow]:
        return [row for row in self.rows if not row.agrees]

    @property
    def unparseable(self) -> int:
        return sum(not row.verdict.parseable for row in self.rows)

    @property
    def judge_models(self) -> list[str]:
        return sorted({row.verdict.model for row in self.rows})

    def by_family(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for row in self.rows:
            counts = out.setdefault(row.item.family, {"n": 0, "agreed": 0})
            counts["n"] += 1
            counts["agreed"] += row.agrees
        return dict(sorted(out.items()))

    def to_dict(self) -> dict:
        """JSON-serialisable, for the build report and the card."""
        return {
            "requested": self.requested,
            "n": self.n,
            "agreed": self.agreed,
            "agreement": self.agreement,
            "unparseable": self.unparseable,
            "judge_models": self.judge_models,
            "prompt_version": JUDGE_PROMPT_VERSION,
            "parser_version": VERDICT_PARSER_VERSION,
            "by_family": self.by_family(),
            "disagreements": [row.to_dict() for row in self.disagreements],
        }


def calibrate(
    engine: Engine, accepted_items: Iterable[JudgeItemLike], n: int, generate: Optional[GenerateFn] = None
) -> CalibrationReport:
    """Judge a deterministic sample (``calibration_sample``) of ``n`` items the rule accepted and
    report agreement: the judge agrees when it says CORRECT."""
    sample = calibration_sample(accepted_items, n)
    verdicts = judge(engine, sample, generate=generate)
    return CalibrationReport(requested=n, rows=tuple(CalibrationRow(i, v) for i, v in zip(sample, verdicts)))


def overturns_by_family(rows: Iterable[tuple[str, Union[Verdict, str, None]]]) -> dict[str, dict[str, int]]:
    """Per family, over ``(family, verdict)`` for rule-rejected items: how many were judged, how
    many the judge promoted, and how many it kept as wrong or unsure. ``None`` (not judged) is
    skipped; a verdict may be given as its label."""
    out: dict[str, dict[str, int]] = {}
    for family, verdict in rows:
        if verdict is None:
            continue
        route, reason = promotion(verdict)
        counts = out.setdefault(family, {"judged": 0, "promoted": 0, "wrong": 0, "unsure": 0})
        counts["judged"] += 1
        if route == ROUTE_ACCEPTED:
            counts["promoted"] += 1
        else:
            counts["wrong" if reason == REASON_WRONG else "unsure"] += 1
    return dict(sorted(out.items()))


def _short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def format_calibration(
    report: CalibrationReport, overturns: Optional[dict[str, dict[str, int]]] = None
) -> str:
    """A plain-text summary: agreement k/N, per family, each disagreement, and (when given) the
    judge's overturns of rule rejects per family."""
    if report.n == 0:
        lines = [f"Judge calibration: no rule-accepted items to sample (asked for {report.requested})."]
    else:
        percent = 100 * report.agreed / report.n
        lines = [
            f"Judge calibration: agreed with the string rule on {report.agreed}/{report.n} "
            f"rule-accepted items ({percent:.1f}%).",
            f"Judge model: {', '.join(report.judge_models)}; prompt v{JUDGE_PROMPT_VERSION}; "
            f"unparseable replies: {report.unparseable}.",
            "Per family:",
        ]
        for family, counts in report.by_family().items():
            lines.append(f"  {family or '(none)'}: {counts['agreed']}/{counts['n']}")
        disagreements = report.disagreements
        lines.append(f"Disagreements ({len(disagreements)}):" if disagreements else "Disagreements: none.")
        for row in disagreements:
            shown = row.verdict.label if row.verdict.parseable else "UNSURE (unparseable)"
            lines.append(
                f"  {row.item.item_id} [{row.item.family or '(none)'}] {shown}: reference "
                f"{_short(' | '.join(row.item.references))}, candidate {_short(row.item.candidate)}"
            )
    if overturns is not None:
        lines.append("Overturns (rule rejects the judge promoted), per family:")
        if not overturns:
            lines.append("  none judged")
        for family, counts in overturns.items():
            lines.append(
                f"  {family or '(none)'}: {counts['promoted']} promoted of {counts['judged']} judged "
                f"(wrong {counts['wrong']}, unsure {counts['unsure']})"
            )
    return "\n".join(lines)


def accepted_items_from_decisions(path) -> list[JudgeItem]:
    """The items a build's string rule accepted, read from its ``work/decisions.parquet``: what
    ``orandcar calibrate`` samples from after the fact."""
    import pyarrow.parquet as pq

    columns = ["id", "question", "references", "model_answer", "family", "rule_passed"]
    table = pq.read_table(path, columns=columns)
    items = []
    for row in table.to_pylist():
        if row["rule_passed"]:
            candidate = strip_reasoning(row["model_answer"] or "").strip()
            items.append(JudgeItem(row["id"], row["question"], tuple(row["references"]), candidate, row["family"]))
    return items
