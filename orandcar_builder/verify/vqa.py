"""``vqa``: the VQA accuracy protocol (VQAv2, TextVQA, VizWiz, OK-VQA).

Normalisation follows the official evaluation script (GT-Vision-Lab/VQA,
``PythonEvaluationTools/vqaEvaluation/vqaEval.py``, its current revision with straight
apostrophes), step by step:

1. newlines and tabs become spaces, then the text is stripped;
2. punctuation: each mark in ``PUNCTUATION`` is deleted when the text has it next to a space or
   has a digit-comma-digit group anywhere, and is replaced by a space otherwise (both tests look at
   the text as it was before any mark was handled); then every period not followed by a digit is
   deleted, at most ``MAX_PERIODS_STRIPPED`` of them (the script passes ``re.UNICODE``, 32, where
   ``re.sub`` expects its ``count``; its look-behind for a preceding digit is written as a
   look-ahead and so never applies);
3. lower-case and split on white space; number words in ``NUMBER_WORDS`` become digits; the
   articles in ``ARTICLES`` are dropped; contractions written without an apostrophe get it back
   (``CONTRACTIONS``, the script's table, whose keys are the forms with one apostrophe missing).

Where implementations disagree: the official script runs only step 2 on the human answers, and
only when they are not all equal, because the VQA annotation files are already normalised. Pool
references come from many sources, so this rule normalises references and answer alike with all
three steps (as lmms-eval's EvalAIAnswerProcessor does). On pre-normalised references the two
agree.

Score: the script's leave-one-out accuracy. For each reference, count how many of the *other*
references equal the answer, divide by ``MATCHES_FOR_FULL_CREDIT`` and cap at 1; average over
references. With ten references (every VQA benchmark) this is the official figure. With fewer
than four the divisor is the number of other references, so an answer all of them give scores 1;
with a single reference the score is the match itself (the script would score it 0: it has no
other reference to compare with).

Pass: at least min(``MATCHES_FOR_FULL_CREDIT``, number of references) references equal the
normalised answer; this is the paper's ``min(#humans that said it / 3, 1) == 1``. Because the
leave-one-out score of a passing answer can be below 1 (3 matches out of 10 score 0.9), the rule
decides with ``decide``, not with ``passes`` alone.
"""

from __future__ import annotations

import functools
import re
from typing import Optional, Sequence

NAME = "vqa"
VERSION = "1"
PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`",
               ",", "?", "!")
MAX_PERIODS_STRIPPED = 32
NUMBER_WORDS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
                "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
ARTICLES = ("a", "an", "the")
MATCHES_FOR_FULL_CREDIT = 3
# The contracted forms the official table restores. Its entries "let's" and "she's" map a word to
# itself and are left out; "somebody'd" -> "somebodyd" runs the other way and is kept as written.
CONTRACTED_FORMS = tuple("""
    ain't aren't can't could've couldn't couldn't've didn't doesn't don't hadn't hadn't've hasn't
    haven't he'd he'd've he's how'd how'll how's I'd've I'm I've isn't it'd it'd've it'll ma'am
    might've mightn't mightn't've must've mustn't needn't not've o'clock oughtn't 'ow's'at shan't
    she'd've should've shouldn't shouldn't've somebody'd've somebody'll somebody's someone'd
    someone'd've someone'll someone's something'd something'd've something'll that's there'd
    there'd've there're there's they'd they'd've they'll they're they've 'twas wasn't we'd've we've
    weren't what'll what're what's what've when's where'd where's where've who'd who'd've who'll
    who's who've why'll why're why's won't would've wouldn't wouldn't've y'all y'all'd've y'all'll
    you'd you'd've you'll you're you've
""".split())
IRREGULAR_CONTRACTIONS = {"somebody'd": "somebodyd"}


def _one_apostrophe_dropped(form: str) -> list[str]:
    return [form[:i] + form[i + 1:] for i, char in enumerate(form) if char == "'"]


CONTRACTIONS = {
    **{variant: form for form in CONTRACTED_FORMS for variant in _one_apostrophe_dropped(form)},
    **IRREGULAR_CONTRACTIONS,
}
CONSTANTS = ("PUNCTUATION", "MAX_PERIODS_STRIPPED", "NUMBER_WORDS", "ARTICLES", "CONTRACTIONS",
             "MATCHES_FOR_FULL_CREDIT")

NORMALISE_CACHE_SIZE = 1 << 16
_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
_PERIOD = re.compile(r"\.(?!\d)")


def process_punctuation(text: str) -> str:
    """Step 2 of the official normalisation."""
    delete = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in PUNCTUATION:
        gone = delete or (mark + " ") in text or (" " + mark) in text
        out = out.replace(mark, "" if gone else " ")
    return _PERIOD.sub("", out, count=MAX_PERIODS_STRIPPED)


def process_digit_article(text: str) -> str:
    """Step 3 of the official normalisation."""
    words = [NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    return " ".join(CONTRACTIONS.get(word, word) for word in words if word not in ARTICLES)


@functools.lru_cache(maxsize=NORMALISE_CACHE_SIZE)  # references repeat: ten answers, few distinct
def normalise(text: str) -> str:
    return process_digit_article(process_punctuation(text.replace("\n", " ").replace("\t", " ").strip()))


def _accuracy(matches: int, flags: Sequence[bool]) -> float:
    n = len(flags)
    if n == 0:
        return 0.0
    if n == 1:
        return 1.0 if matches else 0.0
    divisor = min(MATCHES_FOR_FULL_CREDIT, n - 1)
    return sum(min(1.0, (matches - flag) / divisor) for flag in flags) / n


def decide(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> tuple[float, bool]:
    """(leave-one-out accuracy, passed) of ``prediction`` against all ``references``."""
    answer = normalise(prediction)
    flags = [normalise(ref) == answer for ref in references]
    matches = sum(flags)
    passed = bool(references) and matches >= min(MATCHES_FOR_FULL_CREDIT, len(references))
    return _accuracy(matches, flags), passed


def score(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> float:
    return decide(prediction, references, options)[0]


def passes(value: float) -> bool:
    """Full credit always passes; ``decide`` also passes 3 matches out of more than 3 references."""
    return value >= 1.0


def detail(prediction: str, references: Sequence[str], options: Optional[Sequence[str]] = None) -> str:
    answer = normalise(prediction)
    matches = sum(normalise(ref) == answer for ref in references)
    needed = min(MATCHES_FOR_FULL_CREDIT, len(references))
    return f"normalised {answer!r}: {matches} of {len(references)} references match ({needed} needed)"


def reference_decide(prediction, references, options=None):
    def norm(text):
        text = text.replace("\n", " ").replace("\t", " ").strip()
        out = text
        for p in PUNCTUATION:
            if p + " " in text or " " + p in text or re.search(r"(\d)(,)(\d)", text):
                out = out.replace(p, "")
            else:
                out = out.replace(p, " ")
        out = re.sub(r"\.(?!\d)", "", out, count=MAX_PERIODS_STRIPPED)
        words = []
        for word in out.lower().split():
            word = NUMBER_WORDS.get(word, word)
            if word not in ARTICLES:
                words.append(CONTRACTIONS.get(word, word))
        return " ".join(words)

    answer = norm(prediction)
    refs = [norm(r) for r in references]
    matches = refs.count(answer)
    if not refs:
        return 0.0, False
    passed = matches >= min(MATCHES_FOR_FULL_CREDIT, len(refs))
    if len(refs) == 1:
        return float(matches), passed
    accs = []
    for i in range(len(refs)):
        others = refs[:i] + refs[i + 1:]
        accs.append(min(1.0, others.count(answer) / min(MATCHES_FOR_FULL_CREDIT, len(others))))
    return sum(accs) / len(accs), passed


def reference_score(prediction, references, options=None):
    return reference_decide(prediction, references, options)[0]
