"""Final-answer extraction: the explicit statement of its answer a reply carries, if any.

This step comes before any rule and knows no rule (as lm-evaluation-harness keeps its filters
apart from its metrics): it reads the final answer (reasoning already split off) and returns the
span the model marked as its answer, with the name of the pattern that found it, or nothing.

The patterns (``STATEMENT_PATTERNS``, plus the boxed form and the lone letter on the last line):

- ``boxed``: ``\\boxed{..}`` or ``\\fbox{..}`` with balanced braces; the last one in the reply.
  Content that is one ``\\text{..}`` (or ``\\textbf``, ``\\mathrm``, ``\\mathbf``) wrapper is
  unwrapped: ``\\boxed{\\text{C}}`` gives ``C``;
- ``answer_is``: "the answer is ...", with up to three qualifiers from ``ANSWER_QUALIFIERS``
  ("the correct answer is", "the final integer answer is"); "is", "would be", "should be";
  not after "if" or "whether";
- ``answer_label``: a line that starts with "Answer:" / "Final answer:" / "Correct answer:", in
  bold, as a heading (``### Final answer``), with the answer on the same line after the colon or
  on the next non-empty line;
- ``option_is``: "the correct option is (B)", "the best choice is B";
- ``option_correct``: "option (B) is correct", "choice B is the right one", "option C, garter
  snakes would decrease, is the correct answer";
- ``last_line_letter``: the last line of a reply of two or more lines, or the last sentence of
  its last line, is one capital letter, bracketed, bold or followed by a period ("(B)",
  "**B**", "B.", "... not larger than the car. B");
- ``answer_zh``, ``option_zh``, ``option_correct_zh``: the same statements in Chinese ("答案是
  (C)", "答案:D", "选项为C", "故选C", "选项B是正确答案").

- ``answer_tag``: ``<answer>..</answer>`` (the tags reasoning models are asked for); a box and
  an answer tag are the two *containers*: the last one decides, a statement inside it decides
  for it ("<answer>The answer is c.</answer>" gives "c"), and a malformed one (tags that do not
  pair, an unclosed box, an empty last one) holds nothing;
- ``answer_label_inline``: "Final answer:", "ANSWER:" or, after a sentence, "Answer:" in
  mid-line ("I pick B. Final answer: E", "... actually, ANSWER: B");
- ``i_pick``: "I choose C", "I will go with (b)." (the letter, then an end or "because");
- ``letter_correct``: "(B) is correct", "A seems correct" (at the start of a sentence);
- ``therefore_letter``: "Therefore, (B)." as a whole sentence;
- ``answer_ja``, ``answer_ko``: "答えはBです", "정답은 b입니다" (the letter and at most a copula).

A statement's span is at most ``SPAN_LIMIT`` characters, and a statement is looked for from the
last one back, so deciding a reply takes time linear in its length (a model caught in a loop
writes "the answer is " thousands of times). ``companion`` names the statement a rule that reads
two together (``choice``) reads beside the deciding one: the last statement after the last
container (it decides when the container names nothing), a container of the other kind, or the
statement before a deciding last-line letter (a different answer there means the reply names
two). A last-line letter also counts when it is the last clause of the last sentence ("After
checking the diagram, C."), and lone letters on the lines before it join its span ("B\\nD").

A reply with none of these may still end on a conclusion, which the rules that find values inside
a text (``math``, ``choice``) are also tried on, after the protocol's candidates (whole answer,
first line, first paragraph; see ``candidates.py``), which keep serving a reply that answers first
and explains after. A conclusion is weaker than a statement, so it never decides alone:

- ``conclusion``: what the main clause of the last sentence (closing courtesies such as "I hope
  this helps!" skipped; a trailing ", which means ..." cut off) says a thing is: the words after
  its last "is", "are", "was", "were", "equals", "be", "=" or "≈", cut like a span ("Therefore,
  the range of the set is 7 miles." -> "7 miles");
- ``conclusion_number``: the number right after such a verb (past "about", "approximately", bold
  marks), else the main clause's only number ("Chase will spend $18." -> "18"); number words up
  to twelve count ("There are two bars." -> "two");
- ``emphasis``: the one number a reply sets in bold ("The smallest bar is **0**."), when it sets
  no other number in bold.

A last sentence that denies or doubts (``NEGATION``: "not", "cannot", "impossible", ...)
concludes nothing, unless the question asked for that negation (the negation and the word after
it are in the question: "The pattern that could NOT be folded is (D)." answers "Which could not
be folded?"). A number followed by an operator and a term ("158 + LK") or by a fraction ("11
6/6") is not a concluded number, nor is a clause's only number when it has numbers in brackets
("[0,1)").

The span of a statement is the rest of its sentence: up to the end of the line, or a period,
exclamation or question mark followed by white space (or a Chinese full stop), whichever comes
first; when nothing but markup follows on the line ("The answer is:" then a blank line then "B"),
the next non-empty line. Outside brackets, a comma followed by a word and the words "because",
"since", "with", "which", "where", "while" and "given" end it too ("the answer is no, there are
none" -> "no"; "1982 with an income of $931,441" -> "1982"). ``SPAN_TRIM`` (white space, bold and
italic marks, colons, trailing periods and commas) is stripped from both ends. A span that is
empty or starts with "not" is no statement.

Which statement decides: the last ``boxed`` when the reply has one (the conventional final
marker); otherwise the statement that starts last in the reply (a model that corrects itself
corrects towards the end). The span is always a substring of the reply: ``answer`` in an
accepted row is text the model wrote.

Why a statement decides alone: a reply that says "the answer is (C)" has told us what it picks;
looking for values elsewhere in it (a first line of reasoning, a number computed on the way)
can only add accepts the reply did not claim. Patterns that would find an answer in a reply with
no such statement (the first option a reply lists, a number at the start of a line) are left out
on purpose: they trade wrong accepts for fewer wrong rejects.

``EXTRACTION_VERSION`` changes whenever what a reply extracts to changes; decisions record it.
"""

from __future__ import annotations

import re
from typing import Optional

EXTRACTION_VERSION = "2"
ANSWER_QUALIFIERS = ("final", "correct", "right", "best", "most likely", "likely", "closest", "only", "exact",
                     "true", "integer", "numerical", "numeric", "short", "resulting")
SPAN_TRIM = " \t\r\n*_:,.：，。"
# A statement's span is at most this many characters: a longer "answer" is prose, and the bound
# keeps every pattern linear in the reply (a model caught in a loop repeats "the answer is ").
SPAN_LIMIT = 500
_NOT_SPACE = re.compile(r"\S")
SENTENCE_END = re.compile(r"[.!?](?=\s|$)|[。！？；]")
# A comma followed by a word, or a word that opens a subordinate clause, ends a span outside
# brackets: "no, there are not more buses" is "no"; "1982 with an income of $931,441" is "1982".
CLAUSE_COMMA = re.compile(r"[,，]\s*(?=[^\W\d_])(?![A-Z](?![A-Za-z]))|\s+(?:because|since|with|which|where|while|given)(?![A-Za-z])",
                          re.IGNORECASE)
# Where a trailing clause starts in a conclusion: "is 1:2, which means there is one male" (one
# that runs to the end of the sentence; ", which is a bus," is an aside, not the end).
SUBORDINATE = re.compile(r"[,，]\s*(?:which|meaning)(?![A-Za-z])|\s+because(?![A-Za-z])", re.IGNORECASE)
# Bold markup around a number: "The smallest bar is **0**."
BOLD_NUMBER = re.compile(r"\*\*\s*([-−]?\d+(?:,\d{3})*(?:\.\d+)?%?)\s*\*\*")
BRACKETS = {"(": ")", "[": "]", "{": "}"}
BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{")
ANSWER_IS = re.compile(
    r"(?<![A-Za-z])(?<!if )(?<!whether )(?:the|my|our)\s+(?:(?:" + "|".join(q.replace(" ", r"\s+") for q in ANSWER_QUALIFIERS)
    + r")\s+){0,3}answer\s*(?:\*\*|__)?\s+(?:is|would\s+be|should\s+be|will\s+be)(?![A-Za-z])\s*(?:\*\*|__)?\s*:?",
    re.IGNORECASE)
# "... actually, ANSWER: B", "I pick B. Final answer: E": a label in mid-line, qualified or in capitals.
ANSWER_LABEL_INLINE = re.compile(
    r"(?<![A-Za-z])(?:(?i:final|correct)\s+(?i:answer)|ANSWER|(?<=[.!?]\s)Answer)[ \t*_]*[:：]")
# The answer tags reasoning models are asked to write: "<answer>C</answer>" (group 1: a closing tag).
ANSWER_TAG_MARK = re.compile(r"<(/?)answer\s*>", re.IGNORECASE)
ANSWER_LABEL = re.compile(
    r"^[ \t>#*_-]*(?:(?:final|correct)\s+)?(?:answer|conclusion)[ \t*_]*(?:[:：]|(?=[ \t*_]*$))",
    re.IGNORECASE | re.MULTILINE)
# "I choose C", "so I pick (B) because ...", "I will go with b.": the letter, followed by an end.
I_PICK = re.compile(
    r"(?<![A-Za-z])I(?:\s+(?:will|would|'ll))?\s+(?:choose|pick|select|go\s+with)\s+(?:option\s+|choice\s+)?"
    r"[(\[*`'\"“]*([A-Za-z])[)\]*`'\"”]*(?=\s*(?:$|[.,;:!]|because|since|as|and)(?![A-Za-z]))")
# "(B) is correct", "(C) is the right answer": a bracketed letter said to be right.
LETTER_CORRECT = re.compile(
    r"(?:(?<![A-Za-z])(?<![Oo]ption )(?<![Cc]hoice )\(([A-Za-z])\)|(?:^|(?<=[.!?:]\s))[*_]*([A-Za-z])[*_]*)\s+(?:is|seems|appears)\s+(?:to\s+be\s+)?"
    r"(?:the\s+)?(?:correct|right)(?![A-Za-z])", re.MULTILINE)
# "Therefore, (B).", "Thus C.": a conclusive adverb and a lone letter as the whole sentence.
THEREFORE_LETTER = re.compile(r"(?<![A-Za-z])(?:Therefore|Thus|Hence|So)[,:]?\s+\(?([A-Z])\)?(?=[.!]|\s*$)")
# The letter, then at most a copula ("Bです", "b입니다"), then no more letters: "B猫" is no letter.
ANSWER_JA = re.compile(r"(?:答え|正解)\s*(?:は|:|：)\s*[:：]?\s*[(（]?([A-Za-z])[)）]?(?=(?:です|だ)?(?![^\W\d_]))")
ANSWER_KO = re.compile(r"(?:정답|답)\s*(?:은|는)?\s*[:：]?\s*[(（]?([A-Za-z])[)）]?(?=(?:입니다|이다|이에요|예요)?(?![^\W\d_]))")
OPTION_IS = re.compile(
    r"(?<![A-Za-z])(?:(?:correct|right|best|final)\s+(?:option|choice)(?:\s+letter)?|(?:option|choice)\s+letter)"
    r"\s+(?:is|would\s+be)(?![A-Za-z])\s*:?", re.IGNORECASE)
OPTION_CORRECT = re.compile(
    r"(?<![A-Za-z])(?:option|choice)\s+(\(?[A-Z]\)?)(?:\s*,[^,\n]{1,80},)?\s+is\s+(?:the\s+)?(?:correct|right|best)"
    r"(?![A-Za-z])",
    re.IGNORECASE)
ANSWER_ZH = re.compile(r"(?:最终|正确)?答案\s*(?:是|为|為|[:：])\s*[:：]?")
OPTION_ZH = re.compile(r"(?:选项\s*(?:是|为|為)|故选|应选|應選|(?:^|(?<=[，。,.\s]))选(?=\s*[A-Za-z](?![A-Za-z])))\s*[:：]?",
                       re.MULTILINE)
OPTION_CORRECT_ZH = re.compile(r"选项\s*(\(?[A-Z]\)?)\s*(?:是|为|為)?\s*正确")
LAST_LINE_LETTER = re.compile(r"[ \t*_(\[$]*([A-Z])[ \t*_)\].$]*")
CONCLUSION_VERB = re.compile(r"(?<![A-Za-z])(?<!\bas )(?:is|are|was|were|equals|be)(?![A-Za-z])|[=≈＝]|为|是")
# Closing courtesies a reply may end with after its conclusion; they are skipped to find it.
COURTESY = re.compile(r"(?:i hope|hope this|let me know|is there anything|do you have|do you want|feel free|please let|"
                      r"if you have|thank you|thanks)(?![A-Za-z])", re.IGNORECASE)
# The value a conclusion states: right after its verb, past hedges and markup ("is about **2**").
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")
HEDGES = ("about", "approximately", "around", "roughly", "nearly", "almost", "exactly", "only", "just", "still")
CONCLUDED_NUMBER = re.compile(
    r"(?:[\s*_$]|" + "|".join(HEDGES) + r")*"
    r"([-−]?\d+(?:,\d{3})*(?:\.\d+)?%?|" + "|".join(NUMBER_WORDS) + ")"
    r"(?![\w.,:/^]\w|\w)" + r"(?!\s*[-+*/×·÷^]\s*[\w(\\]|\s+\d+\s*/\s*\d)", re.IGNORECASE)
# A number as written, not part of a name, a power, a ratio or a fraction ("x2", "cm^2", "3:1").
NUMBER = re.compile(r"(?<![\w.^_∠\\:/])[-−]?\d+(?:,\d{3})*(?:\.\d+)?%?(?!\w|[.,:/^]\d)(?!\s*[-+*/×·÷^]\s*[\w(\\]|\s+\d+\s*/\s*\d)")
# A bracketed group (an interval, a point, an aside): its numbers are not the clause's only number.
BRACKETED = re.compile(r"[\[(][^\[\]()]*[\])]")
# A sentence that denies or doubts is no conclusion ("It is not 5", "cannot be 2").
NEGATION = re.compile(r"(?<![A-Za-z])(?:not|no|never|cannot|unable|impossible|unknown)(?![A-Za-z])|n't", re.IGNORECASE)
# The statements, each (name, pattern); a pattern with a group marks the span itself (the letter of
# "option (B) is correct"), one without introduces it (the rest of the sentence after it).
STATEMENTS = (("answer_is", ANSWER_IS), ("answer_label_inline", ANSWER_LABEL_INLINE), ("answer_label", ANSWER_LABEL),
              ("i_pick", I_PICK), ("letter_correct", LETTER_CORRECT), ("therefore_letter", THEREFORE_LETTER),
              ("option_is", OPTION_IS),
              ("option_correct", OPTION_CORRECT), ("answer_zh", ANSWER_ZH), ("option_zh", OPTION_ZH),
              ("option_correct_zh", OPTION_CORRECT_ZH), ("answer_ja", ANSWER_JA), ("answer_ko", ANSWER_KO))
STATEMENT_PATTERNS = tuple(name for name, _ in STATEMENTS)
CONTAINERS = ("boxed", "answer_tag")  # what a reply puts its answer in; the last one decides
EXTRACTION_PATTERNS = CONTAINERS + STATEMENT_PATTERNS + ("last_line_letter", "conclusion", "conclusion_number",
                                                          "emphasis")
# One reply per pattern and what it extracts (the card shows them; a test checks each one).
EXAMPLES = (
    ("boxed", "Therefore, the correct answer is (C).\n\n\\boxed{\\text{C}}", "C"),
    ("answer_tag", "The sign reads STOP, which is option C.\n<answer>C</answer>", "C"),
    ("answer_is", "So the final answer is (B) 120°.", "(B) 120°"),
    ("answer_label_inline", "I pick C at first. Final answer: B", "B"),
    ("answer_label", "The triangle is isosceles.\n\n**Answer:** B", "B"),
    ("i_pick", "The lamp is behind the sofa, so I choose C. The letters in the figure are labels.", "C"),
    ("letter_correct", "First I thought (A). But wait: (B) is correct.", "B"),
    ("therefore_letter", "Therefore, (D). Note that (A) is a common trap, as is (B).", "D"),
    ("option_is", "Thus the correct option letter is D.", "D"),
    ("option_correct", "Option (C) is correct because the angle is 60°.", "(C)"),
    ("answer_zh", "所以，答案是 (C) 12。", "(C) 12"),
    ("option_zh", "因此，∠FAE的度数为52.5°，选项为C。", "C"),
    ("option_correct_zh", "所以选项B是正确答案。", "B"),
    ("answer_ja", "答えはBです。", "B"),
    ("answer_ko", "정답은 b입니다.", "b"),
    ("last_line_letter", "The tower seen from above is a square.\n\n(A)", "A"),
    ("conclusion", "The leaf is long and narrow.\nTherefore, the shape is Linear.", "Linear"),
    ("conclusion_number", "4 kg * $2 = $8\n\nChase will spend $8.\n\nI hope this helps!", "8"),
    ("emphasis", "The smallest bar in the chart is **0**. It is the bar for hazard.", "0"),
)


def balanced_end(text: str, start: int) -> Optional[int]:
    """The index of the brace closing the one opened just before ``start``; None when unbalanced."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """``start``/``end`` moved inwards past ``SPAN_TRIM`` characters."""
    while start < end and text[start] in SPAN_TRIM:
        start += 1
    while end > start and text[end - 1] in SPAN_TRIM:
        end -= 1
    return start, end


def boxed_bounds(text: str) -> Optional[tuple[int, int]]:
    """(start, end) of the last outermost balanced ``\\boxed{..}`` / ``\\fbox{..}``, braces
    included (a box inside another is part of the outer one's content: "\\boxed{B \\boxed{C}}"
    boxes "B \\boxed{C}"); ``(start, start)`` when a box is opened and never closed.

    One left-to-right pass with a stack of open boxes, so a reply of thousands of unclosed
    ``\\boxed{`` takes time linear in its length."""
    found, opened, depth = None, [], 0  # opened: (box start, depth of its content)
    for match in re.finditer(f"({BOXED.pattern})|[{{}}]", text):  # re caches the compiled pattern
        if match.group(1):  # a box opens
            depth += 1
            opened.append((match.start(), depth))
        elif match.group() == "{":
            depth += 1
        elif depth:
            if opened and opened[-1][1] == depth:
                start = opened.pop()[0]
                if not opened:  # an outermost box
                    found = (start, match.end())
            depth -= 1
    if opened:  # an unclosed box: the reply was cut or is malformed, it boxes nothing
        return opened[0][0], opened[0][0]
    return found


def boxed_span(text: str, bounds: Optional[tuple[int, int]] = None) -> Optional[tuple[int, int]]:
    """(start, end) of the content of the last balanced ``\\boxed{..}`` / ``\\fbox{..}``; an
    empty last box, or one never closed, gives an empty span (the reply boxed nothing: an earlier
    box is not its answer). ``bounds``: ``boxed_bounds(text)`` where the caller has it."""
    bounds = boxed_bounds(text) if bounds is None else bounds
    if bounds is None:
        return None
    if bounds[0] == bounds[1]:
        return bounds
    start = BOXED.match(text, bounds[0]).end()
    end = bounds[1] - 1
    inner = TEXT_WRAPPER.match(text, start)
    if inner and balanced_end(text, inner.end()) == end - 1:
        start, end = inner.end(), end - 1
    start, end = trimmed(text, start, end)
    return (start, end) if start < end else (start, start)


def answer_tag(text: str) -> Optional[tuple[int, int, int]]:
    """(tag start, span start, span end) of the last ``<answer>..</answer>`` pair; the span is
    empty when the tags do not pair up (nested, unclosed, a closing tag alone): such a reply
    tags nothing. None when there is no tag."""
    tags = list(ANSWER_TAG_MARK.finditer(text))
    if not tags:
        return None
    depth, pair, opening = 0, None, None
    for tag in tags:
        depth += -1 if tag.group(1) else 1
        if depth not in (0, 1):
            break
        if depth == 1:
            opening = tag
        else:
            pair = (opening, tag)
    if depth or pair is None:
        return tags[0].start(), tags[0].start(), tags[0].start()
    s, e = trimmed(text, pair[0].end(), pair[1].start())
    return pair[0].start(), s, max(s, e)


def clause_end(text: str, start: int, end: int) -> int:
    """Where the first comma followed by a word, outside brackets, cuts ``text[start:end]``."""
    closing: list[str] = []
    for i in range(start, end):
        char = text[i]
        if char in BRACKETS:
            closing.append(BRACKETS[char])
        elif closing and char == closing[-1]:
            closing.pop()
        elif not closing and CLAUSE_COMMA.match(text, i, end):
            return i
    return end


def sentence_span(text: str, start: int) -> Optional[tuple[int, int]]:
    """(start, end) of the span a statement ending at ``start`` introduces (see the module doc)."""
    line_end = text.find("\n", start, start + SPAN_LIMIT + 1)
    line_end = min(len(text), start + SPAN_LIMIT + 1) if line_end < 0 else line_end
    s, e = trimmed(text, start, line_end)
    if s == e:  # nothing on the statement's line: the answer is the next non-empty line
        if line_end > start + SPAN_LIMIT:
            return None
        following = _NOT_SPACE.search(text, line_end)
        if following is None:
            return None
        s = following.start()
        line_end = text.find("\n", s, s + SPAN_LIMIT + 1)
        line_end = min(len(text), s + SPAN_LIMIT + 1) if line_end < 0 else line_end
    end_mark = SENTENCE_END.search(text, s, line_end)
    if end_mark is None and line_end > s + SPAN_LIMIT:
        return None  # no end within SPAN_LIMIT characters: prose, not a stated answer
    s, e = trimmed(text, s, clause_end(text, s, end_mark.start() if end_mark else line_end))
    if s == e or re.match(r"not(?![A-Za-z])", text[s:e], re.IGNORECASE):
        return None
    return s, e


def last_line_letter(text: str) -> Optional[tuple[int, int]]:
    """(start, end) of the letter when the last sentence of a reply of two or more sentences or
    lines stands alone as one ("... not larger than the car. B", "...\n\n(C)"), or the last
    clause of its last sentence does (``_last_clause_letter``); when the lines before the last
    are lone letters too ("B\nD"), the span holds them all."""
    lines = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", text) if m.group().strip()]
    if not lines:
        return None
    start, end = lines[-1]
    ends = [m.end() for m in SENTENCE_END.finditer(text, start, end) if text[m.end():end].strip()]
    if ends:
        start = ends[-1]
    elif len(lines) < 2:
        return _last_clause_letter(text, start, end)
    match = LAST_LINE_LETTER.fullmatch(text, start, end)
    if not match:
        return _last_clause_letter(text, start, end)
    first = match.start(1)
    for s, e in reversed(lines[:-1]):  # lone letters on the lines before: "B\nD" names two
        before = LAST_LINE_LETTER.fullmatch(text, s, e)
        if not before:
            break
        first = before.start(1)
    return first, match.end(1)


def _last_clause_letter(text: str, start: int, end: int) -> Optional[tuple[int, int]]:
    """(start, end) of the letter when the last clause of the sentence ``text[start:end]``, after
    a comma or semicolon, is one letter and the clause before names none ("After checking the
    diagram, C.", "The count is four; D"; not "The points are A, B, C")."""
    cut = max(text.rfind(",", start, end), text.rfind(";", start, end))
    if cut < 0:
        return None
    match = LAST_LINE_LETTER.fullmatch(text, cut + 1, end)
    if not match or re.search(r"(?<![A-Za-z'])[A-Z](?![A-Za-z'])", text[start:cut]):
        return None
    return match.start(1), match.end(1)


def _last_statement(text: str, after: int = 0, before: Optional[int] = None,
                    letters: bool = True) -> Optional[tuple[int, str, str]]:
    """(start, pattern name, span) of the statement that starts last in ``text[after:before]``,
    containers aside (the lone last-line letter too, with ``letters``); None when there is none."""
    found = sorted(((match.start(), rank, name, pattern, match) for rank, (name, pattern) in enumerate(STATEMENTS)
                    for match in pattern.finditer(text, after, len(text) if before is None else before)),
                   key=lambda f: (f[0], f[1]), reverse=True)
    best = None  # (statement start, name, span); later patterns win ties
    for start, _, name, pattern, match in found:  # from the last: the first with a span decides
        if pattern.groups:
            group = next(g for g in range(1, pattern.groups + 1) if match.start(g) >= 0)
            span = (match.start(group), match.end(group)) if match.end(group) > match.start(group) else None
        else:
            span = sentence_span(text, match.end())
        if span is not None:
            best = (start, name, text[span[0]:span[1]])
            break
    letter = last_line_letter(text) if letters else None
    if letter is not None and letter[0] >= after and (best is None or letter[0] >= best[0]):
        best = (letter[0], "last_line_letter", text[letter[0]:letter[1]])
    return best


def container(text: str) -> Optional[tuple[int, int, str, str]]:
    """(start, end, name, span) of the reply's last container, the last outermost box or the last
    answer tag pair, whichever ends last; None when it has neither."""
    found = []
    bounds = boxed_bounds(text)
    if bounds is not None:
        span = boxed_span(text, bounds)
        found.append((bounds[0], bounds[1], "boxed", text[span[0]:span[1]]))
    tag = answer_tag(text)
    if tag is not None:
        end = ANSWER_TAG_MARK.search(text, tag[2])
        found.append((tag[0], end.end() if end else tag[2], "answer_tag", text[tag[1]:tag[2]]))
    if not found:
        return None
    start, end, name, span = max(found, key=lambda f: f[1])
    span = _inner_statement(span)
    return start, end, name, span


def _inner_statement(span: str) -> str:
    inner = _last_statement(span, letters=False)  # "<answer>The answer is c.</answer>" holds "c"
    return inner[2] if inner else span


def other_container(text: str, held: tuple[int, int, str, str]) -> Optional[tuple[str, str]]:
    """(name, span) of the container of the other kind that the reply also holds before its last
    container ``held`` (``container(text)``: "\\boxed{D} ... <answer>b</answer>"), or None."""
    before = text[:held[0]]
    if held[2] == "answer_tag":
        bounds = boxed_bounds(before)
        if bounds is None:
            return None
        span = boxed_span(before, bounds)
        return "boxed", _inner_statement(before[span[0]:span[1]])
    tag = answer_tag(before)
    return ("answer_tag", _inner_statement(before[tag[1]:tag[2]])) if tag else None


AFTER_CONTAINER, BEFORE_LETTER, OTHER_CONTAINER = "after_container", "before_letter", "other_container"


def statements(text: str, companions: bool = False) -> tuple[Optional[tuple[str, str]],
                                                              Optional[tuple[str, str, str]]]:
    """(the deciding statement, as ``extract`` gives it; its companion, or None without
    ``companions``), from one reading of ``text``. The companion is (relation, pattern name, span)
    of the statement a rule that reads two together (``choice``) reads beside the deciding one:

    - ``after_container``: the last statement after the last container ("\\boxed{x = 18} ...
      Therefore, the final answer is (E)."): it decides when the container names no answer;
    - ``before_letter``: when a lone last-line letter decides, the last statement before it ("The
      answer is B.\n(D)"): it never decides, but a different answer in it means the reply names two;
    - ``other_container``: a container of the other kind before the last one ("\\boxed{D} ...
      <answer>b</answer>"), read as ``before_letter`` is (it comes first when there is one).
    """
    held = container(text)
    if held is not None:
        first = (held[2], held[3])
        if not companions:
            return first, None
        other = other_container(text, held)
        if other is not None:
            return first, (OTHER_CONTAINER, other[0], other[1])
        best = _last_statement(text, held[1])
        return first, ((AFTER_CONTAINER, best[1], best[2]) if best else None)
    best = _last_statement(text)
    if best is None:
        return None, None
    if not companions or best[1] != "last_line_letter":
        return (best[1], best[2]), None
    earlier = _last_statement(text, 0, best[0], letters=False)
    return (best[1], best[2]), ((BEFORE_LETTER, earlier[1], earlier[2]) if earlier else None)


def extract(text: str) -> Optional[tuple[str, str]]:
    """(pattern name, span) of the statement that decides ``text``, or None when it has none."""
    return statements(text)[0]


def last_sentence(text: str) -> Optional[tuple[int, int]]:
    """(start, end) of the last sentence of ``text`` that is not a closing courtesy."""
    line_end = len(text)
    while line_end >= 0:  # the lines from the last, each without its newline
        line_start = text.rfind("\n", 0, line_end) + 1
        if line_start < line_end:
            marks = [mark.end() for mark in SENTENCE_END.finditer(text, line_start, line_end)]
            bounds = [line_start, *marks, line_end]
            for i in range(len(bounds) - 1, 0, -1):  # its sentences from the last
                s, e = trimmed(text, bounds[i - 1], bounds[i])
                if s < e and not COURTESY.match(text, s, e):
                    return s, e
        line_end = line_start - 1
    return None


def main_clause(text: str, start: int, end: int) -> int:
    """Where the main clause of the sentence ``text[start:end]`` ends: before the first
    ``SUBORDINATE`` clause that runs to its end without another comma."""
    last_comma = max(text.rfind(",", start, end), text.rfind("，", start, end))
    for cut in SUBORDINATE.finditer(text, start, end):
        if cut.end() > last_comma:
            return cut.start()
    return end


def _denies(text: str, start: int, end: int, question: str) -> bool:
    """Whether ``text[start:end]`` holds a ``NEGATION`` that the question did not ask for: "could
    NOT be folded" denies nothing when the question asks which pattern could not be folded (the
    negation and the word after it, case aside, are in the question)."""
    asked = " ".join(question.casefold().split())
    for match in NEGATION.finditer(text, start, end):
        phrase = " ".join(text[match.start():end].casefold().split()[:2])
        if not asked or phrase not in asked:
            return True
    return False


def concluding_clause(text: str, question: str = "") -> Optional[tuple[int, int]]:
    """(start, end) of the main clause of the last sentence of ``text`` (closing courtesies
    skipped), or None when there is none or that sentence denies or doubts (``NEGATION``, unless
    copied from ``question``)."""
    found = last_sentence(text)
    if found is None or _denies(text, *found, question):
        return None
    return found[0], main_clause(text, *found)


def conclusion(text: str, question: str = "") -> Optional[str]:
    """What the last sentence of ``text`` (closing courtesies skipped) says a thing is: the words
    after its last "is", "are", "was", "were", "equals", "be", "=" or "≈", cut like a statement's
    span ("Therefore, the leaf is Linear." -> "Linear"); None when it has no such word or denies
    or doubts (``NEGATION``: "The area cannot be 12.")."""
    found = concluding_clause(text, question)
    if found is None:
        return None
    start, end = found
    verbs = list(CONCLUSION_VERB.finditer(text, start, end))
    if not verbs:
        return None
    span = sentence_span(text[:end], verbs[-1].end())
    return text[span[0]:span[1]] if span else None


def conclusion_number(text: str, question: str = "") -> Optional[str]:
    """The number the main clause of the last sentence of ``text`` (closing courtesies skipped,
    subordinate clauses such as ", which means ..." cut off) concludes, or None:

    - the number right after its last "is", "are", "=", ... that has one, past hedges such as
      "about" and markup ("So, there are 4 queries with a p-value lower than 0.50." -> "4"; "There are two
      bars" -> "two");
    - else the sentence's only number ("Chase will spend $18." -> "18");
    - nothing when the sentence denies or doubts (``NEGATION``: "It is not 5") or holds several
      numbers and none right after its verb ("reaches 2 at the point (1, 2)").
    """
    found = concluding_clause(text, question)
    if found is None:
        return None
    start, end = found
    for verb in reversed(list(CONCLUSION_VERB.finditer(text, start, end))):
        match = CONCLUDED_NUMBER.match(text, verb.end(), end)
        if match:
            return match.group(1)
    clause = text[start:end]
    outside = BRACKETED.sub(" ", clause)  # numbers inside brackets ("[0,1)", "(1, 2)") are numbers too
    inside = [digit for group in BRACKETED.findall(clause) for digit in re.findall(r"\d+", group)]
    numbers = list(NUMBER.finditer(outside))
    return numbers[0].group() if len(numbers) == 1 and not inside else None


def emphasised_number(text: str) -> Optional[str]:
    """The last number set in bold in ``text`` ("The smallest bar is **0**." -> "0"), unless the
    reply sets several different numbers in bold."""
    numbers = [m.group(1) for m in BOLD_NUMBER.finditer(text)]
    return numbers[-1] if numbers and len(set(numbers)) == 1 else None
