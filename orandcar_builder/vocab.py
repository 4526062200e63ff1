"""The project's vocabulary: every name that crosses a module boundary, defined once.

Configs, routes, the reasons an item is rejected or failed, finish reasons, verdict labels, the
shard file name, option letters and the generation batch size are spelled here and nowhere
else. This module imports nothing from the package, so every stage may import it; the JSON
Schema, the card's field notes and the loading definition use these same strings (a test checks
the schema against this module).
"""

from __future__ import annotations

import re

# --- configs and split of the published dataset --------------------------------------------
CONFIG_THINK = "RS_think"  # accepted rows whose model reply carried reasoning
CONFIG_NOTHINK = "RS_nothink"  # accepted rows without reasoning
CONFIG_REJECTED = "rejected"  # the reference kept, the model's reply in ``wrong_vlm``
ACCEPTED_CONFIGS = (CONFIG_THINK, CONFIG_NOTHINK)
CONFIGS = ACCEPTED_CONFIGS + (CONFIG_REJECTED,)
SPLIT = "train"

# --- shard files: <config>/train-XXXXX-of-YYYYY.parquet --------------------------------------
SHARD_GLOB = f"{SPLIT}-*.parquet"
SHARD_NAME = re.compile(rf"^{SPLIT}-(\d{{5}})-of-(\d{{5}})\.parquet$")


def shard_name(index: int, total: int) -> str:
    """The file name of shard ``index`` (0-based) of ``total`` in a config's folder."""
    return f"{SPLIT}-{index:05d}-of-{total:05d}.parquet"


# --- routes: where a decided QA item goes ----------------------------------------------------
ACCEPTED = "accepted"
REJECTED = "rejected"
# A QA item with no outcome: its generation (or its decision) failed; it is not routed, the
# reason is recorded and a rerun asks for it again.
FAILED = "failed"
ROUTES = (ACCEPTED, REJECTED, FAILED)
CONFIG_ROUTE = {CONFIG_THINK: ACCEPTED, CONFIG_NOTHINK: ACCEPTED, CONFIG_REJECTED: REJECTED}

# --- why an item was rejected (``reason`` of a rejected QA item) -----------------------------
WRONG_ANSWER = "wrong_answer"  # the rule rejected the answer (and the judge, if any, did not promote it)
UNSURE = "unsure"  # the rule rejected it and the judge replied UNSURE (or could not be read)
TRUNCATED = "truncated"  # the reply hit the token limit before any final answer
NO_ANSWER = "no_answer"  # the engine gave no final answer (or cannot answer this kind of item)
REJECT_REASONS = (WRONG_ANSWER, UNSURE, TRUNCATED, NO_ANSWER)
RECHECKED_REASONS = (WRONG_ANSWER, UNSURE)  # a rule decided these: ``recheck`` recomputes them
COUNTED_REASONS = (TRUNCATED, NO_ANSWER)  # decided by the reply's shape alone: counted, not recomputed

# --- what kind of rejection a rule's decision is (``reject_kind`` in work/decisions.parquet) ----
# Work-dir only: the published ``reason`` keeps its values. They tell the model's errors (a pick
# that is wrong) from the rule's limits (nothing it could read as a pick).
NO_PICK = "no_pick"  # the rule found nothing it reads as an answer (a sentence, an empty box, a letter out of range)
WRONG_PICK = "wrong_pick"  # it found one answer, and that answer is not the reference
SEVERAL_PICKS = "several_picks"  # it found two or more different answers ("A or B", a value equal to two options)
NO_OPTION_MATCHED = "no_option_matched"  # a value that equals no option's text or value (``choice``)
REJECT_KINDS = (NO_PICK, WRONG_PICK, SEVERAL_PICKS, NO_OPTION_MATCHED)

# --- why an item failed (``reason`` of a failed QA item; the error text goes to ``error``) -----
GENERATION_FAILED = "generation_failed"
DECISION_FAILED = "decision_failed"
FAIL_REASONS = (GENERATION_FAILED, DECISION_FAILED)

# --- the state of a reply split into reasoning and final answer -----------------------------
ANSWER_OK = "ok"
ANSWER_STATUSES = (ANSWER_OK, TRUNCATED, NO_ANSWER)

# --- finish reasons an engine reports ------------------------------------------------------
FINISH_STOP = "stop"
FINISH_LENGTH = "length"
FINISH_REASONS = (FINISH_STOP, FINISH_LENGTH)  # a reply that ended in any other way is not complete

# --- the judge --------------------------------------------------------------------------------
VERDICT_CORRECT, VERDICT_WRONG, VERDICT_UNSURE = "CORRECT", "WRONG", "UNSURE"
VERDICT_LABELS = (VERDICT_CORRECT, VERDICT_WRONG, VERDICT_UNSURE)
JUDGE_FAMILY = "judge"  # Request.family of every judge request
JUDGE_VERIFIER = "judge"  # qa.verifier of an item the judge promoted

# --- engines ------------------------------------------------------------------------------------
# Fingerprint keys recorded in the manifest and the card but not shaping the output: left out of
# the generation cache key and of the card's engine settings.
REPRODUCIBILITY_KEY = "reproducibility"  # an engine's batch-invariance and precision settings
RECORD_ONLY_KEYS = (REPRODUCIBILITY_KEY,)
GENERATION_BATCH = 32  # requests per engine call where an engine is called in batches

# --- multiple choice ----------------------------------------------------------------------------
OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
