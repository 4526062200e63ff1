"""``orandcar build``: the whole pipeline over a work dir.

pool --read--> items --clean--> admitted --prompt--> requests --generate--> generations
--verify--> decisions --(judge)--> outcomes --route--> rows --write--> dataset folder --validate.

Every pool line ends in exactly one place: dropped (work/dropped.jsonl, with a reason), accepted
or rejected. Timings and paths go to the work dir only; the dataset folder depends on nothing but
the pool, the engine's outputs and the code, so two builds of the same pool give the same bytes.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from .clean import clean
from .dataset.validate import validate_folder
from .dataset.writer import DEFAULT_MAX_SHARD_BYTES, write_dataset
from .engines import Engine, create_engine
from .errors import OrandCarError
from .families import get_family
from .pool import read_pool
from .prompts import question_text
from .records import Admitted, Dropped, Generation, PoolItem, Request, Verdict
from .route import ACCEPTED, REJECTED, Outcome, route
from .verify import get_rule, verify
from . import judge as judging
from .cache import CacheStats, GenerationCache, generate_cached
from .engines.reasoning import STATUS_OK, answer_status
from .records import Decision

GENERATION_BATCH = 32


class BuildError(OrandCarError):
    pass


@dataclass
class BuildResult:
    out: Path
    work: Path
    report: dict
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _split_pool(records: Iterable, dropped: list[Dropped]) -> Iterator[PoolItem]:
    for record in records:
        if isinstance(record, Dropped):
            dropped.append(record)
        else:
            yield record


def admit(pool: Path, *, limit: Optional[int] = None, clean_report: Optional[dict] = None) -> tuple[list[Admitted], list[Dropped]]:
    """Read and clean the pool: the admitted items in pool order, and every dropped line."""
    dropped: list[Dropped] = []
    admitted: list[Admitted] = []
    report = clean_report if clean_report is not None else {}
    pool = Path(pool)
    # source.image paths are relative to the pool file, like the item's own image path.
    for record in clean(_split_pool(read_pool(pool, limit=limit), dropped), report, base_dir=pool.parent):
        (dropped if isinstance(record, Dropped) else admitted).append(record)
    return admitted, dropped


def make_request(admitted: Admitted) -> Request:
    item = admitted.item
    return Request(
        item_id=item.id,
        question=question_text(item.question, item.family, item.options),
        family=item.family,
        image=item.image,
    )


def _generate_all(engine: Engine, requests: Sequence[Request], cache: Optional[GenerationCache],
                  progress: bool, desc: str, stats: CacheStats, batch: int = GENERATION_BATCH) -> list[Generation]:
    """Generations for ``requests`` in order, from the cache where present (see cache.py)."""
    from tqdm import tqdm

    with tqdm(total=len(requests), desc=desc, unit="qa", disable=not progress, file=sys.stderr) as bar:
        def advance(s: CacheStats) -> None:
            bar.n = s.done
            bar.refresh()

        if cache is None:
            generations = []
            for start in range(0, len(requests), batch):
                chunk = list(requests[start:start + batch])
                out = list(engine.generate(chunk))
                if len(out) != len(chunk) or any(g.item_id != r.item_id for g, r in zip(out, chunk)):
                    raise BuildError(f"engine {engine.kind} returned generations out of order or incomplete")
                generations.extend(out)
                stats.total += len(chunk)
                stats.asked += len(chunk)
                advance(stats)
        else:
            generations = generate_cached(engine, requests, cache, batch_size=batch,
                                          on_batch=advance, stats=stats)
        bar.n = len(requests)
        bar.refresh()
    return generations


def decide(admitted: Admitted, request: Request, generation: Generation) -> tuple[Outcome, Optional[Decision]]:
    """The string-rule outcome for one QA item, and the rule's decision where one was made.

    An engine that could not answer, a reasoning that never ended (``truncated``) and an empty
    final answer (``no_answer``) are rejected without a rule decision; they never go to the judge.
    """
    item = admitted.item
    family = get_family(item.family)
    common = dict(
        order=admitted.order, item_id=item.id, image=item.image, question=request.question,
        references=tuple(item.references), options=tuple(item.options or ()), family=item.family,
        source={"dataset": item.source.dataset, "split": item.source.split, "id": item.source.id,
                "origin": item.source.origin},
        policy=admitted.policy, actions=admitted.actions,
    )
    answer = generation.answer
    if generation.unsupported:
        return Outcome(route=REJECTED, wrong_vlm="", reason="no_answer", **common), None
    status = answer_status(answer, generation.finish_reason)
    if status != STATUS_OK:
        return Outcome(route=REJECTED, wrong_vlm=answer, reason=status, **common), None
    decision = verify(family.rule, answer, item.references, item.options)
    if decision.passed:
        return Outcome(route=ACCEPTED, think=generation.think, answer=decision.text,
                       verifier=decision.rule, **common), decision
    return Outcome(route=REJECTED, wrong_vlm=answer, reason="wrong_answer", **common), decision


def apply_verdict(outcome: Outcome, generation: Generation, verdict: Verdict) -> Outcome:
    """The outcome after the judge: only CORRECT promotes, with the model's whole final answer."""
    route_to, reason = judging.promotion(verdict)
    if route_to == ACCEPTED:
        return replace(outcome, route=ACCEPTED, think=generation.think,
                       answer=judging.candidate_answer(generation), verifier=judging.JUDGE_VERIFIER,
                       wrong_vlm="", reason=None)
    return replace(outcome, reason=reason)


def _write_jsonl(path: Path, records: Iterable[dict]) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _write_parquet(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({}), tmp)
    os.replace(tmp, path)


def _admitted_row(a: Admitted) -> dict:
    item = a.item
    return {
        "order": a.order, "id": item.id, "where": item.where, "image": item.image.path,
        "image_sha256": item.image.sha256, "question": item.question,
        "references": item.references, "family": item.family, "options": list(item.options or []),
        "source": json.dumps(item.source.to_dict(), sort_keys=True), "policy": a.policy,
        "actions": list(a.actions),
    }


def _decision_row(outcome: Outcome, generation: Generation, decision: Optional[Decision],
                  verdict: Optional[Verdict]) -> dict:
    return {
        "order": outcome.order, "id": outcome.item_id, "family": outcome.family,
        "image_sha256": outcome.image.sha256, "question": outcome.question,
        "references": list(outcome.references), "text": generation.text, "think": generation.think,
        "model_answer": generation.answer, "finish_reason": generation.finish_reason,
        "unsupported": generation.unsupported, "model": generation.model,
        "revision": generation.revision, "prompt": generation.prompt,
        "rule": decision.rule if decision else None,
        "rule_version": decision.rule_version if decision else None,
        "candidate": decision.candidate if decision else None,
        "score": decision.score if decision else None,
        "rule_passed": decision.passed if decision else None,
        "verdict": verdict.label if verdict else None,
        "verdict_raw": verdict.raw if verdict else None,
        "route": outcome.route, "answer": outcome.answer, "verifier": outcome.verifier,
        "reason": outcome.reason,
    }


def _rows(plans) -> Iterator[dict]:
    for plan in plans:
        yield plan.to_row(plan.image.read())


def build(
    pool: Path,
    out: Path,
    *,
    work: Optional[Path] = None,
    engine: Optional[Engine] = None,
    engine_name: str = "rapidocr",
    engine_options: Optional[dict] = None,
    judge_engine: Optional[Engine] = None,
    judge: str = "none",
    judge_options: Optional[dict] = None,
    calibrate: int = 0,
    limit: Optional[int] = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: bool = True,
    use_cache: bool = True,
    export_generations: Optional[Path] = None,
    generation_batch: int = GENERATION_BATCH,
) -> BuildResult:
    """Build the dataset folder ``out`` from ``pool``; state and reports go to ``work``.

    ``judge`` names the second-pass engine: ``"none"`` (no second pass), ``"same"`` (the
    generation engine, text only) or an engine name built with ``judge_options``; or pass
    ``judge_engine``. ``calibrate`` runs the judge over that many rule-accepted items.
    Generations and verdicts are cached in ``work/cache``: a rerun (after a crash too) asks the
    engines only for what is missing and ends with the same dataset bytes.
    """
    pool, out = Path(pool), Path(out)
    work = Path(work) if work is not None else Path("work")
    if not pool.is_file():
        raise BuildError(f"{pool}: pool file not found")
    work.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()

    clean_report: dict = {}
    admitted, dropped = admit(pool, limit=limit, clean_report=clean_report)
    _write_jsonl(work / "dropped.jsonl", (d.to_dict() for d in dropped))
    _write_parquet(work / "admitted.parquet", [_admitted_row(a) for a in admitted])
    timings["admit"] = time.perf_counter() - t0

    if engine is None:
        engine = create_engine(engine_name, **(engine_options or {}))
    if judge_engine is None and judge != "none":
        judge_engine = engine if judge == "same" else create_engine(judge, **(judge_options or {}))
    if judge_engine is not None and not judge_engine.can_judge:
        raise BuildError(f"engine {judge_engine.kind!r} cannot run the text-only judge pass; use --judge none")

    cache = GenerationCache(work / "cache" / "generations.sqlite") if use_cache else None
    try:
        requests = [make_request(a) for a in admitted]
        t1 = time.perf_counter()
        gen_stats = CacheStats()
        generations = _generate_all(engine, requests, cache, progress, "generate", gen_stats, generation_batch)
        timings["generate"] = time.perf_counter() - t1
        if export_generations is not None:
            from .engines.replay import export_generations as export

            export(generations, export_generations, requests=requests)
        _write_jsonl(work / "prompts.jsonl", (
            {"id": r.item_id, "question": r.question, "prompt": g.prompt} for r, g in zip(requests, generations)))

        t2 = time.perf_counter()
        decided = [decide(a, r, g) for a, r, g in zip(admitted, requests, generations)]
        outcomes = [o for o, _ in decided]
        timings["verify"] = time.perf_counter() - t2

        verdicts: dict[int, Verdict] = {}
        judge_report = None
        if judge_engine is not None:
            t3 = time.perf_counter()
            outcomes, verdicts, judge_report = _judge_pass(
                judge_engine, admitted, requests, generations, decided, cache, calibrate, progress)
            timings["judge"] = time.perf_counter() - t3
    finally:
        if cache is not None:
            cache.close()

    _write_parquet(work / "decisions.parquet", [
        _decision_row(o, g, d, verdicts.get(i)) for i, (o, g, (_, d)) in enumerate(zip(outcomes, generations, decided))])
    _write_jsonl(work / "unsupported.jsonl", (
        {"id": g.item_id, "family": r.family, "explanation": g.unsupported}
        for r, g in zip(requests, generations) if g.unsupported))

    t4 = time.perf_counter()
    plans = route(outcomes)
    summary = write_dataset(out, {c: _rows(p) for c, p in plans.items()}, max_shard_bytes=max_shard_bytes)
    report = _report(pool, dropped, outcomes, summary, clean_report, engine, limit, judge_report, generations)
    from .card import write_card

    write_card(out, report)
    timings["write"] = time.perf_counter() - t4

    t5 = time.perf_counter()
    problems = validate_folder(out)
    timings["validate"] = time.perf_counter() - t5
    timings["total"] = time.perf_counter() - t0

    _write_json(work / "report.json", {
        **report, "timings_s": {k: round(v, 3) for k, v in timings.items()},
        "cache": {"generate": vars(gen_stats), "judge": (judge_report or {}).get("_cache")},
        "validation_problems": problems})
    if judge_report:
        judge_report.pop("_cache", None)
    _write_json(work / "manifest.json", _manifest(pool, out, engine, judge_engine, limit, max_shard_bytes, report["rules"]))
    return BuildResult(out=out, work=work, report=report, problems=problems)


def _judge_pass(judge_engine, admitted, requests, generations, decided, cache, calibrate, progress):
    """Second pass over rule rejects with a final answer; optional calibration on rule accepts."""
    stats = CacheStats()

    def generate(engine, reqs):
        return _generate_all(engine, reqs, cache, progress, "judge", stats)

    def item(i: int) -> judging.JudgeItem:
        a = admitted[i].item
        return judging.JudgeItem(a.id, requests[i].question, tuple(a.references),
                                 judging.candidate_answer(generations[i]), a.family)

    outcomes = [o for o, _ in decided]
    to_judge = [i for i, (o, d) in enumerate(decided)
                if d is not None and judging.needs_judge(generations[i], d)]
    verdict_list = judging.judge(judge_engine, [item(i) for i in to_judge], generate=generate)
    verdicts = dict(zip(to_judge, verdict_list))
    for i, verdict in verdicts.items():
        outcomes[i] = apply_verdict(outcomes[i], generations[i], verdict)

    calibration = None
    if calibrate:
        accepted_by_rule = [item(i) for i, (o, d) in enumerate(decided) if d is not None and d.passed]
        calibration = judging.calibrate(judge_engine, accepted_by_rule, calibrate, generate=generate).to_dict()
    labels = Counter(v.label for v in verdicts.values())
    return outcomes, verdicts, {
        "engine": judge_engine.fingerprint(),
        "prompt_version": judging.JUDGE_PROMPT_VERSION,
        "judged": len(verdicts),
        "verdicts": {label: labels.get(label, 0) for label in judging.LABELS},
        "unparseable": sum(1 for v in verdicts.values() if not getattr(v, "parseable", True)),
        "promoted": labels.get(judging.CORRECT, 0),
        "overturns_by_family": judging.overturns_by_family(
            (admitted[i].item.family, v) for i, v in verdicts.items()),
        "calibration": calibration,
        "_cache": vars(stats),
    }


def _report(pool, dropped, outcomes, summary, clean_report, engine, limit, judge_report, generations) -> dict:
    """The build's figures; everything here is deterministic (the card renders from it)."""
    accepted = [o for o in outcomes if o.route == ACCEPTED]
    rejected = [o for o in outcomes if o.route == REJECTED]
    per_family: dict[str, Counter] = {}
    for o in outcomes:
        counter = per_family.setdefault(o.family, Counter())
        counter["qa"] += 1
        counter[o.route] += 1
        if o.reason:
            counter[f"rejected_{o.reason}"] += 1
    rules = {}
    for o in outcomes:
        rule = get_family(o.family).rule
        rules.setdefault(rule, get_rule(rule).VERSION)
    return {
        "pool": pool.name,
        "limit": limit,
        "items": len(dropped) + len(outcomes),
        "admitted": len(outcomes),
        "dropped": len(dropped),
        "dropped_by_reason": dict(sorted(Counter(d.reason for d in dropped).items())),
        "accepted": len(accepted),
        "rejected": len(rejected),
        "rejected_by_reason": dict(sorted(Counter(o.reason for o in rejected).items())),
        "accepted_by_verifier": dict(sorted(Counter(o.verifier for o in accepted).items())),
        "families": {f: dict(sorted(c.items())) for f, c in sorted(per_family.items())},
        "rules": dict(sorted(rules.items())),
        "configs": summary,
        "cleaning": clean_report,
        "engine": engine.fingerprint(),
        "generation": _generation_settings(engine, generations),
        "judge": {k: v for k, v in judge_report.items() if not k.startswith("_")} if judge_report else None,
    }


def _generation_settings(engine: Engine, generations: Sequence[Generation]) -> dict:
    """How the answers were produced, for the card: from the engine's fingerprint and outputs."""
    fp = engine.fingerprint()
    sampling = fp.get("sampling") or {}
    models = sorted({g.model for g in generations if g.model})
    revisions = sorted({g.revision for g in generations if g.revision})
    template = fp.get("chat_template_kwargs") or {}
    reasoning = template.get("enable_thinking") if "enable_thinking" in template else fp.get("reasoning")
    return {
        "engine": engine.kind,
        "model": fp.get("model") or (models[0] if len(models) == 1 else models) or None,
        "revision": fp.get("revision") or (revisions[0] if len(revisions) == 1 else revisions) or None,
        "temperature": sampling.get("temperature", fp.get("temperature")),
        "max_tokens": sampling.get("max_tokens", fp.get("max_tokens")),
        "reasoning": reasoning if reasoning is not None else "n/a",
    }


def _manifest(pool, out, engine, judge_engine, limit, max_shard_bytes, rules) -> dict:
    import datasets
    import huggingface_hub

    return {
        "orandcar_builder": __version__,
        "pool": str(pool.resolve()),
        "out": str(out.resolve()),
        "limit": limit,
        "max_shard_bytes": max_shard_bytes,
        "engine": engine.fingerprint(),
        "judge_engine": judge_engine.fingerprint() if judge_engine is not None else None,
        "rules": rules,
        "versions": {"python": platform.python_version(), "datasets": datasets.__version__,
                     "huggingface_hub": huggingface_hub.__version__, "pyarrow": pa.__version__},
    }


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def format_summary(result: BuildResult) -> str:
    r = result.report
    lines = [
        f"pool {r['pool']}: {r['items']} items, {r['admitted']} admitted, {r['dropped']} dropped",
        f"accepted {r['accepted']}  rejected {r['rejected']}",
    ]
    for reason, n in r["dropped_by_reason"].items():
        lines.append(f"  dropped   {reason:<22} {n}")
    for reason, n in r["rejected_by_reason"].items():
        lines.append(f"  rejected  {reason:<22} {n}")
    for verifier, n in r["accepted_by_verifier"].items():
        lines.append(f"  accepted  by {verifier:<19} {n}")
    judge = r.get("judge")
    if judge:
        v = judge["verdicts"]
        lines.append(f"  judge: {judge['judged']} judged, {judge['promoted']} promoted "
                     f"(CORRECT {v['CORRECT']}, WRONG {v['WRONG']}, UNSURE {v['UNSURE']}, "
                     f"unparseable {judge['unparseable']})")
        cal = judge.get("calibration")
        if cal:
            lines.append(f"  judge calibration: agreed on {cal['agreed']}/{cal['n']} rule-accepted items")
    else:
        lines.append("  judge: no second pass ran")
    for config, s in r["configs"].items():
        lines.append(f"  {config:<11} {s['rows']} rows in {len(s['shards'])} shard(s), {s['bytes']} bytes")
    lines.append(f"dataset: {result.out}   work dir: {result.work}")
    if result.problems:
        lines.append(f"validation FAILED: {len(result.problems)} problem(s)")
        lines.extend(f"  {p}" for p in result.problems[:20])
    else:
        lines.append("validation: ok")
    return "\n".join(lines)
