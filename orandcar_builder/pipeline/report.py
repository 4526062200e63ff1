"""The build's figures (``figures.BuildFigures``: work/report.json, and the card renders from
them), the manifest (work/manifest.json: what ran, where, with which versions) and the summary
the CLI prints."""

from __future__ import annotations

import dataclasses
import json
import platform
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pyarrow as pa

from .. import __version__
from ..dataset.writer import DEFAULT_MAX_SHARD_BYTES
from ..engines import secret_options_of
from ..engines.base import public_fingerprint, secret_options, settings_of
from ..families import Families
from ..figures import BuildFigures, FamilyYield
from ..files import write_text_atomic
from ..images import IMAGE_OUTSIDE_POOL
from ..parquetio import open_parquet
from ..pool.jsonl import SOURCE_OUTSIDE_POOL
from ..recipe import DEFAULTS_SOURCE, Recipe, options_of, resolve
from ..redact import redact
from ..verify import get_rule
from ..vocab import ACCEPTED, FAILED, JUDGE_VERIFIER, NO_OPTION_MATCHED, NO_PICK, REJECT_KINDS, REJECTED, SEVERAL_PICKS
from ..workdir import WorkDir
from .config import BuildConfig, BuildError
from .work import Engines, GenerateResult, GenerationFacts, JudgeResult, WriteResult


@dataclass
class Tally:
    """The build's counts, from the decisions' compact columns."""

    routes: Counter = field(default_factory=Counter)
    rejected_by_reason: Counter = field(default_factory=Counter)
    accepted_by_verifier: Counter = field(default_factory=Counter)
    families: dict = field(default_factory=dict)
    rules: set = field(default_factory=set)  # the rules that decide the items (see Families.rule_for)
    rules_by_family: dict = field(default_factory=dict)
    reject_kinds: dict = field(default_factory=dict)  # family -> Counter of vocab.REJECT_KINDS (rule rejections)
    promoted: Counter = field(default_factory=Counter)  # family -> QA items the judge promoted


# The decision columns the tally reads: rows equal in all of them count alike.
TALLY_COLUMNS = ("family", "route", "reason", "verifier", "options", "reject_kind")
TALLY_BATCH = 65536


def tally(decisions: Path, families: Families) -> Tally:
    """The counts of ``decisions``; the rules are those ``families`` (the build's registry) gives.

    Rows equal in the columns counted (their options only as present or not) are counted as one
    group with its size, a batch at a time (Arrow's group_by), in the order of their first rows:
    every counter and dict gets its keys in the order a row-by-row pass gives them."""
    counts = Tally()
    parquet = open_parquet(decisions)
    # reject_kind: what kind of rejection the rule's decision was (absent in an older work dir)
    present = [c for c in TALLY_COLUMNS if c in parquet.schema_arrow.names]
    for batch in parquet.iter_batches(batch_size=TALLY_BATCH, columns=present):
        for key, size in _groups(batch, present):
            _count(counts, families, size, **key)
    return counts


def _groups(batch: pa.RecordBatch, present: list[str]) -> list[tuple[dict, int]]:
    """(the counted columns' values, rows) of each group of equal rows in ``batch``, by first row."""
    import pyarrow.compute as pc

    columns = {name: batch.column(name) for name in present if name != "options"}
    if "options" in present:  # only whether there are any: the rule (Families.rule_for)
        columns["options"] = pc.fill_null(pc.greater(pc.list_value_length(batch.column("options")), 0), False)
    columns["_row"] = pa.array(range(batch.num_rows), pa.int64())
    table = pa.table(columns)
    keys = [name for name in columns if name != "_row"]
    grouped = table.group_by(keys, use_threads=False).aggregate([("_row", "min"), ("_row", "count")])
    grouped = grouped.sort_by("_row_min")
    values = {name: grouped.column(name).to_pylist() for name in keys}
    sizes = grouped.column("_row_count").to_pylist()
    return [({name: values[name][i] for name in keys}, size) for i, size in enumerate(sizes)]


def _count(counts: Tally, families: Families, size: int, family=None, route=None, reason=None, verifier=None,
           options=None, reject_kind=None) -> None:
    """``size`` rows with these values counted into ``counts``."""
    counts.routes[route] += size
    rule = families.rule_for(family, options)
    counts.rules.add(rule)
    counts.rules_by_family.setdefault(family, set()).add(rule)
    if route == FAILED:
        return
    counter = counts.families.setdefault(family, Counter())
    counter["qa"] += size
    counter[route] += size
    if reason:
        counter[f"rejected_{reason}"] += size
    if route == ACCEPTED:
        counts.accepted_by_verifier[verifier] += size
        if verifier == JUDGE_VERIFIER:
            counts.promoted[family] += size
    elif route == REJECTED:
        counts.rejected_by_reason[reason] += size
        if reject_kind:
            counts.reject_kinds.setdefault(family, Counter())[reject_kind] += size


# The kinds of rejection where the rule found no single answer to compare: the rule's share of
# ``rejected`` (``wrong_pick`` is the model's).
NO_PICK_KINDS = (NO_PICK, SEVERAL_PICKS, NO_OPTION_MATCHED)


def yield_by_family(counts: Tally) -> dict[str, FamilyYield]:
    """Per family: QA items, accepted by the rule, promoted by the judge, rejected with no pick
    found (``NO_PICK_KINDS``): what a build keeps, and how much of what it throws away is the rule's."""
    out = {}
    for family, c in sorted(counts.families.items()):
        kinds = counts.reject_kinds.get(family, Counter())
        promoted = counts.promoted.get(family, 0)
        out[family] = FamilyYield(qa=c.get("qa", 0), accepted_by_rule=c.get(ACCEPTED, 0) - promoted,
                                  promoted_by_judge=promoted,
                                  rejected_no_pick=sum(kinds.get(k, 0) for k in NO_PICK_KINDS))
    return out


def build_figures(config: BuildConfig, engines: Engines, generated: GenerateResult, judged: Optional[JudgeResult],
                  written: WriteResult, ran: Recipe) -> BuildFigures:
    """The build's figures from the stages' results: the admission (``generated.admitted``), the
    generations' facts, the judge's figures, the writer's summary and the decisions' tally, and
    the recipe that ran (``recipe_ran``). Everything here is deterministic (the card renders
    from it); the runner adds this run's timings and cache counts."""
    admitted, counts = generated.admitted, written.tally
    dropped = admitted.dropped
    rules = {rule: get_rule(rule).VERSION for rule in sorted(counts.rules)}
    rules_by_family = {family: sorted(r) for family, r in sorted(counts.rules_by_family.items())}
    fingerprint = public_fingerprint(engines.engine)
    return BuildFigures(
        pool=config.pool.name,
        limit=config.limit,
        items=sum(dropped.values()) + admitted.admitted,
        admitted=admitted.admitted,
        dropped=sum(dropped.values()),
        dropped_by_reason=dict(sorted(dropped.items())),
        accepted=counts.routes[ACCEPTED],
        rejected=counts.routes[REJECTED],
        failed=counts.routes[FAILED],
        rejected_by_reason=dict(sorted(counts.rejected_by_reason.items())),
        accepted_by_verifier=dict(sorted(counts.accepted_by_verifier.items())),
        families={f: dict(sorted(c.items())) for f, c in sorted(counts.families.items())},
        rules=dict(sorted(rules.items())),
        rules_by_family=rules_by_family,
        reject_kinds={f: {k: c[k] for k in REJECT_KINDS if c.get(k)} for f, c in sorted(counts.reject_kinds.items())},
        yield_=yield_by_family(counts),
        configs=written.configs,
        cleaning=admitted.cleaning,
        engine=fingerprint,
        generation=generation_settings(engines.engine, generated.facts),
        judge=judged.figures if judged is not None else None,
        recipe=reproducible(ran.to_dict()),
        reproduce=reproduce(config, ran),
    )


def generation_settings(engine, facts: GenerationFacts) -> dict:
    """How the answers were produced, for the card: what the engine says of itself
    (``GenerationSettings``, secrets hidden), the model and revision its generations carry where
    it cannot say (one name, or the sorted list when several)."""
    settings = redact(settings_of(engine).to_json(), secret_options(engine))
    for key, seen in (("model", facts.models), ("revision", facts.revisions)):
        if not settings[key]:
            found = sorted(seen)
            settings[key] = (found[0] if len(found) == 1 else found) or None
    return settings


def manifest(config: BuildConfig, out: Path, engine_fingerprint: dict, judge_engine, rules: dict, executor) -> dict:
    """work/manifest.json's own part: ``engine_fingerprint`` and ``rules`` as the build's report has them."""
    return {
        "orandcar_builder": __version__,
        "pool": str(config.pool.resolve()),
        "out": str(out.resolve()),
        "limit": config.limit,
        "max_shard_bytes": config.max_shard_bytes,
        "engine": engine_fingerprint,
        "judge_engine": public_fingerprint(judge_engine) if judge_engine is not None else None,
        "executor": redact(executor.describe()),  # a cluster address may carry credentials
        "rules": rules,
        "versions": {"python": platform.python_version(), **library_versions()},
    }


def library_versions() -> dict:
    """The versions of the libraries that shape the dataset's bytes (the manifest and the card record them)."""
    import datasets
    import huggingface_hub

    return {"datasets": datasets.__version__, "huggingface_hub": huggingface_hub.__version__,
            "pyarrow": pa.__version__}


def recipe_ran(config: BuildConfig, engine, judge_engine, *, engine_given: bool = False,
               judge_given: bool = False) -> Recipe:
    """The recipe this build ran, from the config: its recipe (or the code's defaults) with every
    setting the config holds differently put over it (engine, judge, calibration, repo and card
    options), so a BuildConfig made without a recipe file records and shows what it set. An engine
    object given instead of a name (``engine_given``/``judge_given``) is recorded by its kind.
    It is a record, written after the run: the engine and judge sections come with the secrets
    their engines declare already hidden (``record_without_secrets``)."""
    ran = config.recipe if config.recipe is not None else resolve(None)
    if config.families != ran.family_registry():  # families given as a value, not by the recipe
        ran = ran.with_families(config.families)
    sections: dict = {}
    if not engine_given and (config.engine, dict(config.engine_options)) != (ran.engine["name"], options_of(ran.engine)):
        sections["engine"] = {"name": config.engine, **config.engine_options}
    if not judge_given and (config.judge, dict(config.judge_options)) != (ran.judge["name"], options_of(ran.judge)):
        sections["judge"] = {"name": config.judge, **config.judge_options}
    if config.calibrate != (ran.calibration or 0):
        sections["calibration"] = config.calibrate
    dataset = {**config.card_options, **({"repo": config.repo} if config.repo else {})}
    if dataset != ran.dataset:
        sections["dataset"] = dataset
    engine_name = sections.get("engine", ran.engine)["name"]
    if engine.kind != engine_name:
        sections["engine"] = {"name": engine.kind}
    judge_name = sections.get("judge", ran.judge)["name"]
    if judge_engine is not None and judge_engine is not engine and judge_engine.kind != judge_name:
        sections["judge"] = {"name": judge_engine.kind}
    return record_without_secrets(dataclasses.replace(ran, **sections) if sections else ran, engine, judge_engine)


def record_without_secrets(ran: Recipe, engine, judge_engine) -> Recipe:
    """``ran`` with each option its engine object declares secret (``SECRET_OPTIONS``) hidden in
    its engine and judge sections, besides what the registered engine of that name declares (an
    engine given as an object need not be registered); ``redact.redact`` hides by name and shape too."""
    def hidden(section: Optional[dict], engine_object) -> Optional[dict]:
        if section is None:
            return None
        name = section.get("name")
        if name == "same":  # the judge is the generation engine
            name = (ran.engine or {}).get("name")
        declared = secret_options(engine_object) if engine_object is not None else ()
        return redact(section, (*declared, *secret_options_of(name)))

    return dataclasses.replace(ran, engine=hidden(ran.engine, engine), judge=hidden(ran.judge, judge_engine))


# Engine options that name a file of this machine: the card shows the file's name (its content is
# in the engine's fingerprint), never the path.
FILE_OPTIONS = ("replay",)
# Engine options that set how fast this machine runs, not what the engine answers: left out of the card.
MACHINE_OPTIONS = ("threads",)


def without_secrets(recipe: dict) -> dict:
    """A resolved recipe (``Recipe.to_dict``) as JSON values with every secret of its engine and
    judge sections hidden (``redact.redact``: a key the engine declares secret, a secret-named
    option, a URL's user-info): what work/manifest.json records and the card starts from."""
    out = json.loads(json.dumps(recipe, default=str))
    engine_name = (out.get("engine") or {}).get("name")
    for section in ("engine", "judge"):
        table = out.get(section)
        if isinstance(table, dict):
            name = engine_name if section == "judge" and table.get("name") == "same" else table.get("name")
            out[section] = redact(table, secret_options_of(name))
    return out


def reproducible(recipe: dict) -> dict:
    """A resolved recipe as the card shows it: secrets hidden (``without_secrets``), file options
    reduced to the file's name, options of the machine left out (work/manifest.json keeps them)."""
    out = without_secrets(recipe)
    for section in ("engine", "judge"):
        table = out.get(section) or {}
        for key in FILE_OPTIONS:
            if isinstance(table.get(key), str):
                table[key] = Path(table[key]).name
        for key in MACHINE_OPTIONS:
            table.pop(key, None)
    return out


def reproduce(config: BuildConfig, ran: Recipe) -> dict:
    """What the card's "How to reproduce" section shows besides the recipe: the command, the
    versions that shape the bytes (the engine's own are in its fingerprint) and the git commit of
    the code, when known. The output folder is
    named after the repo (not after this build's -o), so the card does not depend on where it was
    written."""
    from ..card import DEFAULT_REPO_ID

    command = (f"orandcar build {config.pool.name} -o {(ran.repo or DEFAULT_REPO_ID).split('/')[-1]} "
               f"--recipe recipe.toml")
    if config.limit is not None:
        command += f" --limit {config.limit}"
    if config.max_shard_bytes != DEFAULT_MAX_SHARD_BYTES:
        command += f" --max-shard-bytes {config.max_shard_bytes}"
    if config.allow_outside_paths:
        command += " --allow-outside-paths"
    from .provenance import source_info

    try:
        source = source_info()
    except ValueError as exc:
        raise BuildError(str(exc)) from None
    return {
        "command": command,
        "recipe_file": ran.source != DEFAULTS_SOURCE,  # whether one was given (its name stays in the manifest)
        "versions": {"orandcar-builder": __version__, **library_versions()},
        "source": source,  # the git commit of the code that built it, when known (pipeline/provenance.py)
    }


def write_json(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n")


OUTSIDE_POOL_REASONS = (IMAGE_OUTSIDE_POOL, SOURCE_OUTSIDE_POOL)


def _cache_line(cache: dict) -> str:
    """How many requests of each pass the cache answered, from report.json's ``cache``."""
    parts = [f"{name} {stats.get('hits', 0)} of {stats.get('total', 0)} requests from the cache, "
             f"{stats.get('asked', 0)} asked of the engine" for name, stats in cache.items() if stats]
    return "  cache: " + "; ".join(parts) if parts else ""


def _timings_line(timings: dict) -> str:
    """The stages' seconds, from report.json's ``timings_s`` (the total last)."""
    shown = [f"{name} {seconds:.1f} s" for name, seconds in timings.items() if name != "total"]
    total = f"; total {timings['total']:.1f} s" if "total" in timings else ""
    return "  time: " + ", ".join(shown) + total if shown else ""


def format_summary(result) -> str:
    """The CLI's summary of a BuildResult (its ``figures``). A QA item is one question about an
    image (a pool line); a row is one image with its QA items, so the configs' rows are counted apart."""
    f = result.figures
    dropped_by_reason = f.dropped_by_reason or {}
    lines = [
        f"pool {f.pool}: {f.items} lines, one QA item each: {f.admitted} admitted, {f.dropped} dropped",
        f"QA items: accepted {f.accepted}  rejected {f.rejected}",
    ]
    if any(stage.counters.get("reused") for stage in getattr(result, "stages", ())):
        lines.insert(1, "  admission reused: the pool file, its images and the admission settings are unchanged "
                        "since the work dir's last build")
    for reason, n in dropped_by_reason.items():
        lines.append(f"  dropped   {reason:<22} {n}")
    outside = sum(n for reason, n in dropped_by_reason.items() if reason in OUTSIDE_POOL_REASONS)
    if outside:
        lines.append(f"  {outside} QA item(s) name an image outside the pool file's folder, and no import seal of this "
                     f"machine vouches for it (a pool `orandcar import` wrote here, unchanged since, has one): if you "
                     f"trust this pool, build again with --allow-outside-paths")
    work = WorkDir(result.work)
    if f.failed:
        lines.append(f"  failed    {f.failed} QA item(s) got no answer (reasons in {work.failed}; a rerun asks again)")
    for reason, n in (f.rejected_by_reason or {}).items():
        lines.append(f"  rejected  {reason:<22} {n}")
    for verifier, n in (f.accepted_by_verifier or {}).items():
        lines.append(f"  accepted  by {verifier:<19} {n}")
    for family, y in (f.yield_ or {}).items():
        lines.append(f"  yield     {family:<22} {y.accepted_by_rule} accepted by the rule, {y.promoted_by_judge} "
                     f"promoted by the judge, {y.rejected_no_pick} rejected with no pick found, of {y.qa} QA items")
    judge = f.judge
    if judge is not None:
        v = judge.verdicts
        lines.append(f"  judge: {judge.judged} QA items judged, {judge.promoted} promoted "
                     f"(CORRECT {v['CORRECT']}, WRONG {v['WRONG']}, UNSURE {v['UNSURE']}, "
                     f"unparseable {judge.unparseable})")
        cal = judge.calibration
        if cal:
            lines.append(f"  judge calibration: agreed on {cal['agreed']}/{cal['n']} rule-accepted QA items")
    else:
        lines.append("  judge: no second pass ran")
    lines.append("rows (one per image, holding its QA items):")
    for config, s in (f.configs or {}).items():
        lines.append(f"  {config:<11} {s['rows']} rows, {s['qa']} QA items, in {len(s['shards'])} shard(s), "
                     f"{s['bytes']} bytes")
    lines.extend(line for line in (_cache_line(f.cache or {}), _timings_line(f.timings_s or {})) if line)
    lines.append(f"dataset: {result.out}   work dir: {result.work}")
    if work.review.is_file():
        lines.append(f"review page: {work.review}")
    if result.problems:
        lines.append(f"validation FAILED: {len(result.problems)} problem(s)")
        lines.extend(f"  {p}" for p in result.problems[:20])
        if result.staged is not None:
            lines.append(f"the new dataset was not swapped in ({result.out} is unchanged); it is kept in "
                         f"{result.staged} for inspection")
    else:
        lines.append("validation: ok")
    return "\n".join(lines)
