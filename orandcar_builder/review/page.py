"""The review page of a build: one self-contained HTML file (``work/report.html``).

Everything is embedded (charts as SVG, thumbnails as PNG, both as data URIs; the style sheet
inline) and a Content-Security-Policy forbids every network load and every script, so the page
opens from disk anywhere and text from the pool or the model cannot run as code; the template
escapes all text as well (jinja2 autoescaping). The page is rendered from the work dir's files
alone: the same build gives the same bytes. Its two "This run" tables show the run's cache counts
and seconds per stage, as report.json records them; the dataset card never shows them.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..figures import BuildFigures, JudgeFigures
from ..files import read_json_lines, write_bytes_atomic
from ..vocab import ACCEPTED, FINISH_LENGTH
from ..workdir import WorkDir
from . import charts
from .collect import (
    ACCEPTED_KIND,
    FAILED_KIND,
    PROMOTED_KIND,
    SAMPLE_SALT,
    SAMPLES_PER_KIND,
    Collected,
    ReviewError,
    calibration_of,
    collect,
    dropped_examples,
    read_figures,
    wanted_ids,
)
from .thumbnails import thumbnails

if TYPE_CHECKING:
    from .ahead import PageAhead

TEMPLATE = "review.html.j2"
TEXT_SHOWN_CHARS = 1500  # longer texts (replies, reasoning, judge replies) are cut, with the rest counted
LIST_TEXT_CHARS = 160  # texts in one-line tables
FAILED_EXAMPLES = 5
CALIBRATION_DISAGREEMENTS_SHOWN = 100
KIND_LABELS = {ACCEPTED_KIND: "accepted by the rule", PROMOTED_KIND: "promoted by the judge",
               FAILED_KIND: "failed (no generation)"}


@dataclass(frozen=True)
class ReviewResult:
    path: Path
    bytes: int
    items: int  # QA items the decisions hold
    sampled: int  # items shown with their image


@dataclass(frozen=True)
class DecisionsPart:
    """What the page takes from ``work/decisions.parquet`` alone: the counts, samples and lengths
    (``collect``) and the three charts drawn from them (SVG bytes), the page's costly part at scale,
    which ``ahead.PageAhead`` prepares in a process of its own."""

    collected: Collected
    charts: dict[str, bytes]


def decisions_part(decisions: Path, wanted: frozenset, per_kind: int) -> DecisionsPart:
    """The page's part of the decisions: every row read once, the charts drawn."""
    collected = collect(decisions, wanted_ids=wanted, per_kind=per_kind)
    family_counts = collected.family_counts()
    return DecisionsPart(collected, {
        "acceptance": charts.acceptance_chart(family_counts),
        "rejection": charts.rejection_chart(family_counts),
        "lengths": charts.length_chart([collected.reasoning.histogram(), collected.final_answer.histogram()]),
    })


def kind_label(kind: str) -> str:
    """A kind as the page names it; a rejection kind ("rejected: <reason>") names itself."""
    return KIND_LABELS.get(kind, kind)


def clip(text: Any, limit: int = TEXT_SHOWN_CHARS) -> dict:
    """``{"text", "more", "chars"}``: the text cut to ``limit`` characters and how many were left out."""
    text = "" if text is None else str(text)
    return {"text": text[:limit], "more": max(0, len(text) - limit), "chars": len(text)}


def _svg_uri(data: bytes) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")


def _percent(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "–"


def decided_span(row: dict) -> Optional[str]:
    """The text the rule compared: as recorded (``decided_text``), or, for a build that predates
    that column, the named candidate of the model's final answer recomputed (every candidate a
    rule may be tried on, the conclusions of ``math`` and ``choice`` included)."""
    from ..verify.candidates import candidates

    if row.get("decided_text"):
        return row["decided_text"]
    name = row.get("candidate")
    if not name or row.get("final_answer") is None:
        return None
    return dict(candidates(row["final_answer"], conclusions=True)).get(name)


def _score(value: Any) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value)


def _extra_value(value: Any) -> str:
    import json

    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def item_view(row: dict, thumbs: dict, extra_columns: list[str]) -> dict:
    """What an item card shows, from one decisions row."""
    route = row.get("route")
    finish = row.get("finish_reason")
    answer = row.get("final_answer")
    think = row.get("think") or ""
    return {
        "id": row.get("id"), "order": row.get("order"), "source": row.get("source") or {},
        "thumb": thumbs.get(row.get("image_sha256") or ""), "image": os.path.basename(row.get("image") or ""),
        "question": clip(row.get("question")),
        "references": [clip(r, LIST_TEXT_CHARS * 2) for r in row.get("references") or []],
        "route": route, "reason": row.get("reason"), "verifier": row.get("verifier") or "", "finish_reason": finish,
        "truncated": finish == FINISH_LENGTH, "unsupported": row.get("unsupported"),
        "final_answer": clip(answer) if answer is not None else None,
        "think": clip(think) if think else None,
        "rule": row.get("rule"), "rule_version": row.get("rule_version"), "candidate": row.get("candidate"),
        "prompt_tokens": row.get("prompt_tokens"), "completion_tokens": row.get("completion_tokens"),
        "extraction": row.get("extraction") or "", "extraction_version": row.get("extraction_version") or "",
        "span": clip(span) if (span := decided_span(row)) is not None else None,
        "score": _score(row.get("score")), "rule_passed": row.get("rule_passed"),
        "stored": clip(row.get("accepted_text") if route == ACCEPTED else row.get("wrong_vlm")),
        "verdict": row.get("verdict"), "verdict_raw": clip(row.get("verdict_raw")) if row.get("verdict_raw") else None,
        "error": row.get("error"),
        "extra": [(name, clip(_extra_value(row.get(name)), LIST_TEXT_CHARS * 3)) for name in extra_columns
                  if row.get(name) is not None],
    }


def _glance(figures: BuildFigures) -> list[dict]:
    judge = figures.judge
    admitted = figures.admitted or 0
    cards = [
        {"label": "pool items", "value": figures.items, "note": figures.pool or ""},
        {"label": "dropped by cleaning", "value": figures.dropped,
         "note": _percent(figures.dropped or 0, figures.items or 0) + " of the pool"},
        {"label": "admitted", "value": admitted, "note": "asked to the model"},
        {"label": "accepted", "value": figures.accepted,
         "note": _percent(figures.accepted or 0, admitted) + " of admitted"},
        {"label": "rejected", "value": figures.rejected,
         "note": _percent(figures.rejected or 0, admitted) + " of admitted"},
    ]
    if figures.failed:
        cards.append({"label": "failed", "value": figures.failed, "note": "no generation; a rerun asks again"})
    if judge is not None:
        cards.append({"label": "judged", "value": judge.judged,
                      "note": f"{judge.promoted or 0:,} promoted"})
    else:
        cards.append({"label": "judge", "value": None, "note": "no second pass ran"})
    return cards


def _family_rows(figures: BuildFigures, family_counts: list[charts.FamilyCounts]) -> list[dict]:
    rules = figures.rules or {}
    by_family = figures.rules_by_family or {}
    yields, kinds = figures.yield_ or {}, figures.reject_kinds or {}
    rows = []
    for f in family_counts:
        rows.append({
            "family": f.family, "anchor": "family-" + _anchor(f.family),
            "rules": [(r, rules.get(r)) for r in by_family.get(f.family, [])],
            "qa": f.total, "accepted": f.accepted_by_rule, "promoted": f.promoted, "rejected": f.rejected,
            "failed": f.failed, "rate": _percent(f.accepted, f.total),
            "reasons": sorted(f.rejected_by_reason.items()),
            # what of the rule's rejections it could not read as one answer (issue: keep every right answer)
            "no_pick": yields[f.family].rejected_no_pick if f.family in yields else None,
            "kinds": sorted((kinds.get(f.family) or {}).items()),
        })
    return rows


def _judge(figures: BuildFigures, calibration: Optional[dict], source: Optional[str], collected: Collected,
           thumbs: dict) -> Optional[dict]:
    ran = figures.judge is not None
    if not ran and not calibration:
        return None
    judge = figures.judge if ran else JudgeFigures()
    disagreements = []
    for entry in (calibration or {}).get("disagreements") or []:
        row = collected.wanted.get(entry.get("id"), {})
        disagreements.append({
            "id": entry.get("id"), "family": entry.get("family"),
            "thumb": thumbs.get(row.get("image_sha256") or ""),
            "question": clip(entry.get("question")),
            "references": [clip(r, LIST_TEXT_CHARS * 2) for r in entry.get("references") or []],
            "candidate": clip(entry.get("candidate")), "verdict": entry.get("verdict"),
            "judge_reply": clip(entry.get("judge_reply")),
        })
    promoted = [{"id": r.get("id"), "family": r.get("family"), "question": clip(r.get("question"), LIST_TEXT_CHARS),
                 "references": clip(" | ".join(r.get("references") or []), LIST_TEXT_CHARS),
                 "answer": clip(r.get("accepted_text"), LIST_TEXT_CHARS), "rule": r.get("rule"),
                 "score": _score(r.get("score")), "verdict_raw": clip(r.get("verdict_raw"), LIST_TEXT_CHARS)}
                for r in collected.promoted]
    n = (calibration or {}).get("n") or 0
    return {
        "ran": ran, "engine": judge.engine, "prompt_version": judge.prompt_version,
        "judged": judge.judged, "verdicts": judge.verdicts or {},
        "unparseable": judge.unparseable, "promoted_count": judge.promoted,
        "overturns": judge.overturns_by_family or {},
        "promoted": promoted, "promoted_total": collected.promoted_total,
        "calibration": calibration, "calibration_source": source,
        "agreement": _percent((calibration or {}).get("agreed") or 0, n) if n else None,
        "disagreements": disagreements[:CALIBRATION_DISAGREEMENTS_SHOWN],
        "disagreements_total": len(disagreements),
    }


def _lengths(collected: Collected) -> list[dict]:
    out = []
    for stats in (collected.reasoning, collected.final_answer):
        out.append({"label": stats.label, "n": stats.n, "truncated": stats.n_truncated,
                    "truncated_share": _percent(stats.n_truncated, stats.n),
                    "mean": f"{stats.mean:,.0f}" if stats.mean is not None else "–", "longest": stats.longest,
                    "empty": int(stats.complete[0] + stats.truncated[0]) if stats.n else 0})
    return out


def _failed_examples(work: WorkDir) -> list[dict]:
    out = []
    for record in read_json_lines(work.failed):
        if record is not None:
            out.append({"id": record.get("id"), "reason": record.get("reason"),
                        "detail": clip(record.get("detail"), LIST_TEXT_CHARS * 2)})
        if len(out) >= FAILED_EXAMPLES:
            break
    return out


def _run(figures: BuildFigures) -> dict:
    """The "This run" tables: report.json's ``cache`` (per pass) and ``timings_s`` (per stage)."""
    cache = [{"name": name, "total": stats.get("total", 0), "hits": stats.get("hits", 0), "asked": stats.get("asked", 0)}
             for name, stats in (figures.cache or {}).items() if isinstance(stats, dict)]
    timings = [(name, f"{seconds:.2f}") for name, seconds in (figures.timings_s or {}).items()
               if isinstance(seconds, (int, float))]
    return {"cache": cache, "timings": timings}


def review_context(out: Path, work: Path, *, per_kind: int = SAMPLES_PER_KIND,
                   ahead: Optional["PageAhead"] = None) -> tuple[dict, int]:
    """The template's context for the build that wrote dataset folder ``out`` from work dir
    ``work``, and the number of items shown with their image (the QA items read are
    ``context["items"]``). ``ahead``: the decisions' part prepared in a process of its own
    while the build ran its last stages, used when it was prepared from this very file for the
    same samples, else made here."""
    if per_kind < 0:
        raise ReviewError(f"samples per family and outcome must be 0 or more, not {per_kind}")
    out, work = Path(out), WorkDir(work)
    figures = read_figures(work.report)
    calibration, calibration_source = calibration_of(figures, work)
    wanted = wanted_ids(calibration)
    part = ahead.take(work.decisions, wanted, per_kind) if ahead is not None else None
    if part is None:
        part = decisions_part(work.decisions, wanted, per_kind)
    collected = part.collected
    family_counts = collected.family_counts()

    sampled_rows = [row for (_, _), items in collected.samples.items() for row in (s.row for s in items)]
    images = [(row.get("image"), row.get("image_sha256")) for row in sampled_rows]
    images += [(row.get("image"), row.get("image_sha256")) for row in collected.wanted.values()]
    thumbs = thumbnails(images, out)

    families = []
    for f in family_counts:
        kinds = []
        for kind, rows in collected.family_samples(f.family):
            kinds.append({"kind": kind, "label": kind_label(kind), "total": collected.counts[f.family][kind],
                          "rows": [item_view(r, thumbs, collected.extra_columns) for r in rows]})
        families.append({"family": f.family, "anchor": "family-" + _anchor(f.family), "kinds": kinds,
                         "total": f.total})

    context = {
        "title": out.name or str(out),
        "figures": figures,
        "generation": figures.generation or {},
        "glance": _glance(figures),
        "run": _run(figures),
        "charts": {name: _svg_uri(data) for name, data in part.charts.items()},
        "families_table": _family_rows(figures, family_counts),
        "judge": _judge(figures, calibration, calibration_source, collected, thumbs),
        "lengths": _lengths(collected),
        "no_generation": collected.no_generation,
        "dropped": dropped_examples(work.dropped),
        "failed_examples": _failed_examples(work),
        "families": families,
        "extra_columns": collected.extra_columns,
        "sample_salt": SAMPLE_SALT,
        "per_kind": per_kind,
        "items": collected.rows,
        "validation_problems": figures.validation_problems or [],
    }
    return context, len(sampled_rows)


def _anchor(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name) or "family"


def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("orandcar_builder.review", "templates"),
        autoescape=True,  # every value is text from the pool or the model unless marked otherwise
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["number"] = lambda n: "–" if n is None else f"{n:,}"
    return env


def render_review(out: Path, work: Path, *, per_kind: int = SAMPLES_PER_KIND,
                  ahead: Optional["PageAhead"] = None) -> tuple[str, int, int]:
    """The page's HTML text (writes nothing), the QA items read and the items shown with their image."""
    context, sampled = review_context(out, work, per_kind=per_kind, ahead=ahead)
    return _environment().get_template(TEMPLATE).render(**context), context["items"], sampled


def write_review(out: Path, work: Path, target: Optional[Path] = None, *,
                 per_kind: int = SAMPLES_PER_KIND, ahead: Optional["PageAhead"] = None) -> ReviewResult:
    """Write the review page of the build (dataset folder ``out``, work dir ``work``) to
    ``target`` (default ``work/report.html``), replacing it only once complete; ``per_kind``
    items are shown per family and outcome (``ahead``: see ``review_context``)."""
    out, work = Path(out), Path(work)
    if not work.is_dir():
        raise ReviewError(f"{work}: work dir not found; run `orandcar build` first")
    if not out.is_dir():
        raise ReviewError(f"{out}: dataset folder not found (the page shows images the build routed there)")
    target = Path(target) if target is not None else WorkDir(work).review
    html, items, sampled = render_review(out, work, per_kind=per_kind, ahead=ahead)
    data = html.encode("utf-8")
    try:
        write_bytes_atomic(target, data)
    except OSError as exc:
        raise ReviewError(f"{target}: cannot write the review page ({exc.strerror or exc})") from None
    return ReviewResult(path=target, bytes=len(data), items=items, sampled=sampled)
