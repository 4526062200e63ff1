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
from dataclasses import dataclass, field
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
from .records import Admitted, Dropped, Generation, PoolItem, Request
from .route import ACCEPTED, REJECTED, Outcome, route
from .verify import get_rule, verify

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
    for record in clean(_split_pool(read_pool(pool, limit=limit), dropped), report):
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


def _generate_all(engine: Engine, requests: Sequence[Request], generate: Callable, progress: bool) -> list[Generation]:
    from tqdm import tqdm

    generations: list[Generation] = []
    with tqdm(total=len(requests), desc="generate", unit="qa", disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(requests), GENERATION_BATCH):
            batch = list(requests[start:start + GENERATION_BATCH])
            out = generate(engine, batch)
            if len(out) != len(batch) or any(g.item_id != r.item_id for g, r in zip(out, batch)):
                raise BuildError(f"engine {engine.kind} returned generations out of order or incomplete")
            generations.extend(out)
            bar.update(len(batch))
    return generations


def _plain_generate(engine: Engine, requests: Sequence[Request]) -> list[Generation]:
    return engine.generate(requests)


def decide(admitted: Admitted, request: Request, generation: Generation) -> Outcome:
    """The string-rule decision for one QA item, as an outcome ready for routing."""
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
        return Outcome(route=REJECTED, wrong_vlm="", reason="no_answer", **common)
    if generation.finish_reason == "length" and not answer.strip():
        return Outcome(route=REJECTED, wrong_vlm=answer, reason="truncated", **common)
    if not answer.strip():
        return Outcome(route=REJECTED, wrong_vlm=answer, reason="no_answer", **common)
    decision = verify(family.rule, answer, item.references, item.options)
    if decision.passed:
        return Outcome(route=ACCEPTED, think=generation.think, answer=decision.text,
                       verifier=decision.rule, **common)
    return Outcome(route=REJECTED, wrong_vlm=answer, reason="wrong_answer", **common)


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


def _decision_row(outcome: Outcome, generation: Generation) -> dict:
    return {
        "order": outcome.order, "id": outcome.item_id, "family": outcome.family,
        "image_sha256": outcome.image.sha256, "question": outcome.question,
        "references": list(outcome.references), "text": generation.text, "think": generation.think,
        "model_answer": generation.answer, "finish_reason": generation.finish_reason,
        "unsupported": generation.unsupported, "model": generation.model,
        "revision": generation.revision, "prompt": generation.prompt, "route": outcome.route,
        "answer": outcome.answer, "verifier": outcome.verifier, "reason": outcome.reason,
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
    limit: Optional[int] = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    progress: bool = True,
    generate: Optional[Callable[[Engine, Sequence[Request]], list[Generation]]] = None,
) -> BuildResult:
    """Build the dataset folder ``out`` from ``pool``; state and reports go to ``work``."""
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
    requests = [make_request(a) for a in admitted]
    t1 = time.perf_counter()
    generations = _generate_all(engine, requests, generate or _plain_generate, progress)
    timings["generate"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    outcomes = [decide(a, r, g) for a, r, g in zip(admitted, requests, generations)]
    _write_parquet(work / "decisions.parquet", [_decision_row(o, g) for o, g in zip(outcomes, generations)])
    _write_jsonl(work / "unsupported.jsonl", (
        {"id": g.item_id, "family": r.family, "explanation": g.unsupported}
        for r, g in zip(requests, generations) if g.unsupported))
    timings["verify"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    plans = route(outcomes)
    summary = write_dataset(out, {c: _rows(p) for c, p in plans.items()}, max_shard_bytes=max_shard_bytes)
    report = _report(pool, dropped, outcomes, summary, clean_report, engine, limit)
    from .card import write_card

    write_card(out, report)
    timings["write"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    problems = validate_folder(out)
    timings["validate"] = time.perf_counter() - t4
    timings["total"] = time.perf_counter() - t0

    _write_json(work / "report.json", {**report, "timings_s": {k: round(v, 3) for k, v in timings.items()},
                                        "validation_problems": problems})
    _write_json(work / "manifest.json", _manifest(pool, out, engine, limit, max_shard_bytes, outcomes))
    return BuildResult(out=out, work=work, report=report, problems=problems)


def _report(pool, dropped, outcomes, summary, clean_report, engine, limit) -> dict:
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
        "judge": None,
    }


def _manifest(pool, out, engine, limit, max_shard_bytes, outcomes) -> dict:
    import datasets
    import huggingface_hub

    return {
        "orandcar_builder": __version__,
        "pool": str(pool.resolve()),
        "out": str(out.resolve()),
        "limit": limit,
        "max_shard_bytes": max_shard_bytes,
        "engine": engine.fingerprint(),
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
    for config, s in r["configs"].items():
        lines.append(f"  {config:<11} {s['rows']} rows in {len(s['shards'])} shard(s), {s['bytes']} bytes")
    lines.append(f"dataset: {result.out}   work dir: {result.work}")
    if result.problems:
        lines.append(f"validation FAILED: {len(result.problems)} problem(s)")
        lines.extend(f"  {p}" for p in result.problems[:20])
    else:
        lines.append("validation: ok")
    return "\n".join(lines)
