"""Model-as-judge: the text-only second pass over answers the string rule rejected.

The judge is shown the question, the reference(s) and the candidate's final answer, never the
image nor the candidate's reasoning, and is asked to compare, not to solve. Only a CORRECT
verdict promotes an item; WRONG and UNSURE stay rejected, and a reply that cannot be read is
UNSURE (counted as ``judge_unparseable``). Calibration runs the judge over items the rule had
already accepted and reports how often the two agree.

- ``prompt``: the template and its version, the item to judge, the request made from it;
- ``verdict``: the reply parser, the verdict of a judge generation, promotion and overturns;
- ``run``: which answers go to the judge, and ``judge(engine, items, generate)``: requests out,
  verdicts back (the caller's ``generate`` runs them: this package imports no engine);
- ``calibration``: the sample of rule-accepted items, the agreement report and its text.
"""

from ..vocab import JUDGE_FAMILY, JUDGE_VERIFIER
from .calibration import (
                          CALIBRATION_SAMPLE_SALT,
                          CalibrationReport,
                          CalibrationRow,
                          accepted_items_from_decisions,
                          calibrate,
                          calibration_sample,
                          format_calibration,
                          sample_key,
)
from .prompt import (
                          JUDGE_PROMPT_TEMPLATE,
                          JUDGE_PROMPT_VERSION,
                          REFERENCE_BLOCK,
                          JudgeItem,
                          JudgeItemLike,
                          as_judge_item,
                          candidate_answer,
                          judge_prompt,
                          judge_request,
)
from .run import GenerateFn, judge, needs_judge
from .verdict import (
                          VERDICT_PARSER_VERSION,
                          JudgeVerdict,
                          apply_verdict,
                          overturns_by_family,
                          parse_verdict,
                          promotion,
                          reply_after_reasoning,
                          verdict_from_generation,
)

__all__ = [
    "CALIBRATION_SAMPLE_SALT", "CalibrationReport", "CalibrationRow", "GenerateFn", "JUDGE_FAMILY",
    "JUDGE_PROMPT_TEMPLATE", "JUDGE_PROMPT_VERSION", "JUDGE_VERIFIER", "JudgeItem", "JudgeItemLike", "JudgeVerdict",
    "REFERENCE_BLOCK",
    "VERDICT_PARSER_VERSION", "accepted_items_from_decisions", "apply_verdict", "as_judge_item", "calibrate",
    "calibration_sample", "candidate_answer", "format_calibration", "judge", "judge_prompt", "judge_request",
    "needs_judge", "overturns_by_family", "parse_verdict", "promotion", "reply_after_reasoning", "sample_key",
    "verdict_from_generation",
]
