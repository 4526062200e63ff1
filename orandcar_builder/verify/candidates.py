"""Which parts of a model's answer a rule is tried on.

The final answer (leaked reasoning removed) first goes through final-answer extraction
(``extract.py``). When it carries an explicit statement of its answer ("The answer is (C).",
``\\boxed{0.6}``, "**Answer:** B"), that statement's span is the one candidate (``statement``):
the reply has said what it answers, and nothing else in it is tried. Otherwise the candidates are
the published protocol's: the answer as a whole, its first line and its first paragraph, which
serve a reply that answers first and explains after. The rules that find a value inside a text
(``math`` and ``choice``, marked ``FINDS_VALUES``) do not search a candidate that is a sentence
(see ``shape.py``), and are also tried on what the reply's last sentence concludes
(``extract.conclusion``, ``extract.conclusion_number``), after the protocol's candidates; the
other rules keep the protocol's three.
"""

from __future__ import annotations

import re

from .extract import conclusion, conclusion_number, emphasised_number, statements

STATEMENT_CANDIDATE = "statement"
# A reply that opens by restating the options ("A. Two birds" / "B. Three birds" ...) does not
# answer on its first line: two lines in a row that start with an option label.
_OPTION_LIST = re.compile(r"\A\s*\(?[A-Z][.)][ \t]+\S[^\n]*\n\s*\(?[A-Z][.)][ \t]+\S")
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def strip_reasoning(text: str) -> str:
    """Remove reasoning that leaked into an answer: whole ``<think>..</think>`` blocks, and
    everything up to a stray closing ``</think>`` whose opening tag was in the prompt."""
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return text


def final_answer_candidates(answer: str, conclusions: bool = False, question: str = "",
                            companions: bool = False) -> list[tuple[str, str, str]]:
    """(candidate, text, extraction) for each text a rule is tried on, in order. When ``answer``
    carries an explicit statement: only ``("statement", span, pattern name)``. Otherwise the
    answer as a whole, its first line and its first paragraph, each stripped, with extraction
    ``""``, then, when ``conclusions`` is set (rules that find values inside a text: ``math``,
    ``choice``), what its last sentence concludes (``conclusion``, ``conclusion_number``) and the
    number it sets in bold (``emphasis``); a text equal to an earlier one is not repeated. An
    empty answer has no candidates. A reply that opens with the option list has no first-line or
    first-paragraph candidate. ``question`` (the text the model was asked) lets a conclusion
    keep a negation the question asked for. With ``companions`` (rules that read two statements
    together: ``choice``), the statement ``extract.statements`` finds comes second, as
    ``(relation, span, pattern)``: ``after_container``, ``before_letter`` or ``other_container``."""
    full = strip_reasoning(answer).strip()
    if not full:
        return []
    statement, other = statements(full, companions)
    if statement is not None:
        out = [(STATEMENT_CANDIDATE, statement[1], statement[0])]
        return out + [(other[0], other[2], other[1])] if other else out
    out = [("full", full, "")]
    tries = []
    if not _OPTION_LIST.match(full):
        tries = [("first_line", full.split("\n", 1)[0].strip(), ""),
                 ("first_paragraph", _PARAGRAPH_BREAK.split(full, 1)[0].strip(), "")]
    seen = {full}
    if conclusions:
        tries += [(name, find(full, question) or "", name) for name, find in (
            ("conclusion", conclusion), ("conclusion_number", conclusion_number))]
        tries.append(("emphasis", emphasised_number(full) or "", "emphasis"))
    for label, text, extraction in tries:
        if text and text not in seen:
            out.append((label, text, extraction))
            seen.add(text)
    return out


def candidates(answer: str, conclusions: bool = False, question: str = "") -> list[tuple[str, str]]:
    """The (candidate, text) pairs of ``answer`` (see ``final_answer_candidates``)."""
    return [(label, text) for label, text, _ in final_answer_candidates(answer, conclusions, question)]
