"""``orandcar diff OLD NEW``: what changed between two versions of the dataset.

Each side is a local dataset folder (as ``orandcar build -o`` writes it) or ``ORG/NAME@REV`` on the
Hub (a tag, a branch or a commit; ``ORG/NAME`` alone reads ``main``), read through huggingface_hub
with the user's token. Only the columns that identify and describe a QA item are read from the
shards (``image_sha256``, ``qa``, ``clean_meta``): the image bytes stay where they are, so a Hub
side costs the column chunks, not the whole shards.

Per config it counts rows (one per image, by ``image_sha256``) and QA items added, removed and
changed. A QA item is identified by its source (dataset, split, id) and its question without the
instruction its family appended (each side's card records the families' instructions and
separators), so a changed instruction or separator changes the question of an item, not its
identity. An item that still finds no partner is paired with the one item of the other side that
has its source and its image, when there is exactly one such item on each side. An item changed
when anything it holds changed (the question, the answer, the reasoning, the verifier, the reason,
the references or options, the image); each changed item names the parts that changed. Values
are shown with their whitespace visible: a string as a Python literal (``'\\n'``, ``' '``), any
other value as JSON; ``--json`` holds them exactly. Across configs it lists the items
whose decision flipped (accepted in ``RS_nothink`` on one side, in ``rejected`` on the other, with
both answers), the acceptance per family on each side, and what changed in the settings the cards
record (``dataset.cardfile.BUILD_KEY``: engine fingerprint, judge, rule and extraction versions, cleaning
policy, recipe).
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pyarrow.parquet as pq
from huggingface_hub.errors import HfHubHTTPError

from .dataset.cardfile import CardFormatError, card_settings, header_families, split_card
from .dataset.layout import README
from .diffstore import NEW, OLD, DiffStore, decode_key
from .errors import OrandCarError
from .families import DEFAULT_FAMILIES
from .parquetio import ShardTooLargeError, check_row_groups
from .vocab import ACCEPTED, CONFIG_NOTHINK, CONFIG_REJECTED, CONFIGS, REJECTED, SHARD_NAME

ACCEPTED_CONFIG = CONFIG_NOTHINK  # holds every accepted QA item once (RS_think holds the same items)
COLUMNS = ("image_sha256", "qa", "clean_meta")
SHOWN_CHARS = 200  # an answer kept for the list of flipped items is cut here
FLIPS_SHOWN = 20  # flipped items (and changed items) the human output lists (--json lists all)
QA_PARTS = ("question", "answer", "think", "org_answer", "verifier", "wrong_vlm", "reason")  # compared apart
ITEM_PARTS = (*QA_PARTS, "qa_other", "references", "options", "family", "source_other", "image", "policy")
PART_DIGEST = 8  # bytes of blake2b per part: an item's digest is its parts' digests, in ITEM_PARTS order
CONTEXT_CHARS = 24  # characters either side of where two questions differ, in the human output
READ_BATCH = 1024  # rows turned into Python objects at a time
READ_BUFFER = 1 << 20  # bytes of each column's read buffer
SCRATCH_BYTES_PER_ITEM = 2000  # diffstore's file, both sides (measured: 186 MB for two 100k-item folders)
HUB_READ_BLOCK = 1 << 20  # bytes per ranged read of a Hub shard: the columns read, not the images
_HUB_SPEC = re.compile(r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<rev>.+))?$")


class DiffError(OrandCarError):
    """A side that cannot be read: not a dataset folder, not on the Hub, no access."""


# --- the two sides ---------------------------------------------------------------------------------

@dataclass
class Side:
    """One version of the dataset: where it is, its card, and a way to open its shards."""

    spec: str
    kind: str  # "folder" or "hub"
    revision: Optional[str]  # the commit a Hub side was read at
    card: str
    shards: dict[str, list[str]]  # config -> shard names, in order
    opener: Callable[[str], Any] = field(repr=False)  # shard name -> context manager of a binary file
    files: dict[str, "HubFile"] = field(default_factory=dict)  # a Hub side: every file of the revision

    def describe(self) -> str:
        if self.kind == "hub":
            return f"{self.spec} (commit {self.revision[:12]})" if self.revision else self.spec
        return f"{self.spec} (local folder)"


@dataclass(frozen=True)
class HubFile:
    """A file of a Hub side's listing: its size and the hashes the Hub gives for its content."""

    size: int
    blob_id: str  # git blob id (of the LFS pointer, for an LFS file)
    lfs_sha256: Optional[str] = None


def _local_side(spec: str, folder: Path) -> Side:
    if not folder.is_dir():
        raise DiffError(f"{spec}: not a folder (give a dataset folder that `orandcar build -o` wrote, "
                        "or ORG/NAME@REV on the Hub)")
    readme = folder / README
    try:
        card = readme.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DiffError(f"{readme}: cannot read the dataset card ({exc}); is {spec} a dataset folder?") from None
    shards = {}
    for config in CONFIGS:
        directory = folder / config
        names = sorted(p.name for p in directory.iterdir() if SHARD_NAME.match(p.name)) if directory.is_dir() else []
        shards[config] = [f"{config}/{name}" for name in names]
    if not any(shards.values()):
        raise DiffError(f"{spec}: holds no shards of {', '.join(CONFIGS)} (not a dataset folder)")
    return Side(spec, "folder", None, card, shards, lambda name: open(folder / name, "rb"))


def _hub_side(spec: str, repo_id: str, revision: str, token: Optional[str], *, strict: bool = True) -> Side:
    """The side at ``revision`` (resolved to its commit). ``strict``: a revision without a card or
    shards is a DiffError and the card is read; otherwise the card is left to the caller (``""``),
    which reports what is missing (``validate``)."""
    from huggingface_hub import HfApi, HfFileSystem
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi(token=token, library_name="orandcar-builder")
    fs = HfFileSystem(token=token, endpoint=api.endpoint)
    try:
        info = api.dataset_info(repo_id, revision=revision)
        root = f"datasets/{repo_id}@{info.sha}"
        # One recursive listing, through the file system: it keeps the listing, so opening a file
        # later asks the Hub for nothing but the bytes.
        entries = {item["name"][len(root) + 1:]: HubFile(item["size"], item.get("blob_id") or "",
                                                          (item.get("lfs") or {}).get("sha256"))
                   for item in fs.find(root, detail=True).values() if item.get("type") == "file"}
        files = sorted(entries)
    except RevisionNotFoundError:
        raise DiffError(f"{spec}: {repo_id} has no tag, branch or commit {revision!r}") from None
    except RepositoryNotFoundError:
        raise DiffError(f"{spec}: no dataset repo {repo_id} on {api.endpoint} that this token can read "
                        "(set HF_TOKEN or run `hf auth login` for a private or gated repo)") from None
    except HfHubHTTPError as exc:
        raise DiffError(_refused(spec, repo_id, exc)) from None
    except OSError as exc:
        raise DiffError(f"{spec}: could not reach the Hub at {api.endpoint} ({exc})") from None
    if strict and README not in files:
        raise DiffError(f"{spec}: the repo holds no {README} at {info.sha[:12]} (not an OrandCar dataset)")

    def opener(name: str, block_size: int = HUB_READ_BLOCK):
        return fs.open(f"{root}/{name}", "rb", block_size=block_size)

    shards = {config: sorted(f for f in files if f.startswith(f"{config}/") and "/" not in f[len(config) + 1:]
                             and SHARD_NAME.match(f[len(config) + 1:])) for config in CONFIGS}
    if not strict:
        return Side(spec, "hub", info.sha, "", shards, opener, entries)
    try:
        card = fs.read_bytes(f"{root}/{README}").decode("utf-8")
    except HfHubHTTPError as exc:
        raise DiffError(_refused(spec, repo_id, exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DiffError(f"{spec}: cannot read its {README} ({exc})") from None
    if not any(shards.values()):
        raise DiffError(f"{spec}: holds no shards of {', '.join(CONFIGS)} at {info.sha[:12]}")
    return Side(spec, "hub", info.sha, card, shards, opener, entries)


def _refused(spec: str, repo_id: str, exc: Exception) -> str:
    response = getattr(exc, "response", None)
    status = response.status_code if response is not None else None
    if status in (401, 403):
        return (f"{spec}: the Hub refused to let this token read {repo_id} (HTTP {status}); the dataset is gated: "
                "request access on its page, then set HF_TOKEN or run `hf auth login`")
    return f"{spec}: the Hub answered HTTP {status} ({getattr(exc, 'server_message', None) or 'no message'})"


def hub_spec(spec: str) -> Optional[tuple[str, str]]:
    """(repo id, revision) of ``ORG/NAME[@REV]`` (``main`` when no REV is given); None otherwise."""
    match = _HUB_SPEC.match(spec)
    return (match.group("repo"), match.group("rev") or "main") if match else None


def open_hub_side(spec: str, *, token: Optional[str] = None, strict: bool = True) -> Side:
    """The Hub side ``ORG/NAME[@REV]`` (see ``_hub_side`` for ``strict``)."""
    parsed = hub_spec(spec)
    if parsed is None:
        raise DiffError(f"{spec}: no such folder, and not ORG/NAME@REV (a dataset repo on the Hub at a "
                        "tag, branch or commit)")
    return _hub_side(spec, *parsed, token, strict=strict)


def open_side(spec: str, *, token: Optional[str] = None) -> Side:
    """A side from its spec: an existing path is a local folder; ``ORG/NAME[@REV]`` is on the Hub."""
    path = Path(spec)
    if path.exists() or path.is_symlink():
        return _local_side(spec, path)
    return open_hub_side(spec, token=token)


# --- reading one side ----------------------------------------------------------------------------

def changed_parts(before: bytes, after: bytes) -> list[str]:
    """The names (ITEM_PARTS) of the parts whose digests differ between two item digests."""
    return [name for i, name in enumerate(ITEM_PARTS)
            if before[i * PART_DIGEST:(i + 1) * PART_DIGEST] != after[i * PART_DIGEST:(i + 1) * PART_DIGEST]]


def _digest(value: Any, size: int = 16) -> bytes:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=size).digest()


def _item_digest(item: dict, source: dict, sha: str, policy: Any) -> bytes:
    """One PART_DIGEST-byte digest per part of ITEM_PARTS, concatenated."""
    parts = [item.get(name) for name in QA_PARTS]
    parts.append({k: v for k, v in item.items() if k not in QA_PARTS})
    parts += [source.get("references"), source.get("options"), source.get("family")]
    parts.append({k: v for k, v in source.items() if k not in ("references", "options", "family")})
    parts += [sha, policy]
    return b"".join(_digest(part, PART_DIGEST) for part in parts)


def _cut(text: Any) -> Any:
    return text[:SHOWN_CHARS] + "…" if isinstance(text, str) and len(text) > SHOWN_CHARS else text


def side_instructions(side: Side) -> dict[str, str]:
    """family -> the text its instruction appended to a question on ``side`` (separator and
    instruction), as the side's card records the families; the code's families where it records
    none (a card written before recipes were recorded)."""
    families = DEFAULT_FAMILIES
    if side.card:
        try:
            families = header_families(split_card(side.card, source=f"{side.spec}: {README}")[0])
        except CardFormatError:
            families = DEFAULT_FAMILIES
    return {f.name: f.separator + f.instruction for f in families.values() if f.instruction}


def question_stem(question: str, appended: Optional[str]) -> str:
    """``question`` without the instruction its family appended (``appended``: separator and
    instruction), when it ends with it; else the question as it is."""
    if appended and question.endswith(appended):
        return question[:-len(appended)]
    return question


def _rows(side: Side, config: str) -> Iterator[dict]:
    for name in side.shards.get(config, []):
        try:
            with side.opener(name) as handle:
                # Buffered, unthreaded reads: a reader holds a buffer per column, not a row group's
                # column chunks (row groups grow with the dataset up to the writer's 100 MB).
                parquet = pq.ParquetFile(handle, pre_buffer=False, buffer_size=READ_BUFFER)
                missing = [c for c in COLUMNS if c not in parquet.schema_arrow.names]
                if missing:
                    raise DiffError(f"{side.spec}: {name} has no column(s) {', '.join(missing)}")
                try:
                    check_row_groups(handle, parquet, columns=COLUMNS)
                except ShardTooLargeError as exc:
                    raise DiffError(f"{side.spec}: {name}: {exc}") from None
                for group in range(parquet.num_row_groups):  # one reader per row group: one over
                    # the whole file holds more as it goes (measured: benchmarks/bench_diff.py)
                    for batch in parquet.iter_batches(batch_size=READ_BATCH, row_groups=[group],
                                                      columns=list(COLUMNS), use_threads=False):
                        yield from batch.to_pylist()
        except DiffError:
            raise
        except HfHubHTTPError as exc:
            raise DiffError(_refused(side.spec, side.spec.split("@")[0], exc)) from None
        except Exception as exc:  # a damaged shard or a failed read: name it
            raise DiffError(f"{side.spec}: cannot read {name} ({type(exc).__name__}: {exc})") from None


def load_config(store: DiffStore, side_index: int, side: Side, config: str, instructions: dict) -> None:
    """Put the rows and QA items of one config of ``side`` into ``store``, keyed as the diff
    compares them: a row by its image, an item by (dataset, split, id, question without its
    family's instruction); ``instructions`` is ``side_instructions(side)``."""
    cfg = CONFIGS.index(config)
    for pos, row in enumerate(_rows(side, config)):
        sha = row.get("image_sha256") or ""
        qa = row.get("qa") or []
        meta = row.get("clean_meta") or {}
        sources = meta.get("sources") or []
        store.add_row(side_index, cfg, pos, sha, _digest([qa, meta]))
        for i, item in enumerate(qa):
            source = sources[i] if i < len(sources) and isinstance(sources[i], dict) else {}
            family = str(source.get("family", ""))
            question = str(item.get("question", ""))
            ref = (str(source.get("dataset", "")), str(source.get("split", "")), str(source.get("id", "")))
            key = ref + (question_stem(question, instructions.get(family)),)
            shown = {k: _cut(item.get(k)) for k in ("answer", "wrong_vlm", "reason", "verifier") if k in item}
            store.add_item(side_index, cfg, key, _item_digest(item, source, sha, meta.get("policy")), family,
                           question, shown, ref + (sha,))


# --- the comparison ------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Item:
    """A QA item as a query of the store returns it."""

    key: tuple
    digest: bytes
    family: str
    question: str
    shown: dict

    @classmethod
    def of(cls, record: tuple) -> "_Item":
        key, digest, family, question, shown = record
        return cls(decode_key(key), digest, family, question, json.loads(shown))


def _key_json(item: _Item) -> dict:
    """An item's identity as --json lists it: its source and its full question."""
    key = item.key
    out = {"dataset": key[0], "split": key[1], "id": key[2], "question": item.question}
    if len(key) > 4:
        out["occurrence"] = key[4]
    return out


def _changed_json(before: _Item, after: _Item) -> dict:
    """A changed item: its identity on the new side, the parts that changed, the old question when
    it changed."""
    out = {**_key_json(after), "family": after.family or before.family,
           "changed": changed_parts(before.digest, after.digest)}
    if before.question != after.question:
        out["old_question"] = before.question
    return out


@dataclass
class Listing:
    """The differences of one kind (rows added, items flipped, ...): how many, exactly, and the first
    ``keep`` of them (None: all, what --json lists), so that what a diff holds for its printout does
    not grow with the differences; ``parts``: of changed items, how many changed each part."""

    keep: Optional[int] = None
    count: int = 0
    kept: list = field(default_factory=list)
    parts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, entries: Iterator, keep: Optional[int]) -> "Listing":
        listing = cls(keep)
        for entry in entries:
            listing.add(entry)
        return listing

    def add(self, entry: Any) -> None:
        self.count += 1
        if self.keep is None or len(self.kept) < self.keep:
            self.kept.append(entry)
        if isinstance(entry, dict):
            for part in entry.get("changed", ()):
                self.parts[part] = self.parts.get(part, 0) + 1

    def all(self) -> list:
        """Every entry; only a listing that kept them all has them."""
        if len(self.kept) != self.count:
            raise ValueError(f"this diff kept {len(self.kept)} of {self.count} entries (keep={self.keep})")
        return list(self.kept)


def _row_counts(store: DiffStore, cfg: int, keep: Optional[int]) -> dict:
    return {"old": store.count("row", OLD, cfg), "new": store.count("row", NEW, cfg),
            "added": Listing.of((key for key, _ in store.only_in("row", NEW, cfg)), keep),
            "removed": Listing.of((key for key, _ in store.only_in("row", OLD, cfg)), keep),
            "changed": Listing.of((new[0] for _, new in store.changed("row", cfg)), keep)}


def _item_counts(store: DiffStore, cfg: int, keep: Optional[int]) -> dict:
    """Like ``_row_counts``, each item listed as --json shows it (``_key_json``, ``_changed_json``)."""
    return {"old": store.count("item", OLD, cfg), "new": store.count("item", NEW, cfg),
            "added": Listing.of((_key_json(_Item.of(r)) for r in store.only_in("item", NEW, cfg)), keep),
            "removed": Listing.of((_key_json(_Item.of(r)) for r in store.only_in("item", OLD, cfg)), keep),
            "changed": Listing.of((_changed_json(_Item.of(o), _Item.of(n)) for o, n in store.changed("item", cfg)),
                                  keep)}


def _flatten(value: Any, prefix: str = "") -> dict:
    if isinstance(value, dict) and value:
        out = {}
        for key, inner in value.items():
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value} if prefix else {}


def settings_changes(old: dict, new: dict) -> list[dict]:
    """Each setting (a dotted path into the ``orandcar_build`` blocks) whose value differs. A rule
    that decided items on one side only (the pools cover other families) is no change of version."""
    a, b = _flatten(old), _flatten(new)
    keys = list(dict.fromkeys([*a, *b]))
    return [{"key": key, "old": a.get(key), "new": b.get(key)} for key in keys
            if a.get(key) != b.get(key) and not (key.startswith("rules.") and (key not in a or key not in b))]


def _share(n_accepted: int, n_total: int) -> Optional[float]:
    """The accepted share, rounded to 6 decimals; None when there is no item."""
    return round(n_accepted / n_total, 6) if n_total else None


def _acceptance(accepted: dict[str, int], rejected: dict[str, int]) -> dict:
    """family -> accepted, rejected, QA items and the accepted share, from per-family counts."""
    families: dict[str, dict] = {}
    for counts_by_family, label in ((accepted, ACCEPTED), (rejected, REJECTED)):
        for family, n in counts_by_family.items():
            counts = families.setdefault(family, {ACCEPTED: 0, REJECTED: 0})
            counts[label] += n
    for counts in families.values():
        total = counts[ACCEPTED] + counts[REJECTED]
        counts["qa"] = total
        counts["share"] = _share(counts[ACCEPTED], total)
    return families


@dataclass
class DatasetDiff:
    old: Side
    new: Side
    configs: dict[str, dict]  # config -> {"rows": counts, "qa": counts}; counts' lists are Listings
    flipped: dict[str, Listing]  # "accepted_to_rejected" / "rejected_to_accepted" -> items
    acceptance: dict[str, dict]  # family -> {"old": counts, "new": counts}
    settings: dict  # {"old": block, "new": block, "changed": [...]}
    dataset: dict = field(default_factory=dict)  # QA items of the dataset (accepted or rejected): counts


    @property
    def identical(self) -> bool:
        return (not any(c[part][kind].count for c in self.configs.values() for part in ("rows", "qa")
                        for kind in ("added", "removed", "changed"))
                and not self.settings["changed"])

    def totals(self) -> dict:
        """QA items of the dataset as a whole: old and new counts; added, removed, and changed
        without changing side (an item whose decision flipped is counted as flipped, not here)."""
        return {kind: value if isinstance(value, int) else value.count for kind, value in self.dataset.items()}

    def summary(self) -> dict:
        """The few figures a Versions entry records: QA items of the dataset (accepted or rejected)
        old and new, added, removed, changed (``totals``); flips each way; accepted share; the
        settings (top-level keys of ``orandcar_build``) that changed."""
        totals = self.totals()
        accepted = self.configs[ACCEPTED_CONFIG]["qa"]
        return {
            "qa": {"old": totals["old"], "new": totals["new"], "added": totals["added"],
                   "removed": totals["removed"], "changed": totals["changed"]},
            "flipped": {kind: items.count for kind, items in self.flipped.items()},
            "accepted_share": {"old": _share(accepted["old"], totals["old"]),
                               "new": _share(accepted["new"], totals["new"])},
            "settings_changed": sorted({change["key"].split(".")[0] for change in self.settings["changed"]}),
        }

    def to_dict(self) -> dict:
        """Everything, every difference listed (a diff made with ``keep=None``)."""
        def side(s: Side) -> dict:
            return {"source": s.spec, "kind": s.kind, "revision": s.revision}

        def counts(c: dict) -> dict:
            out = {"old": c["old"], "new": c["new"]}
            for kind in ("added", "removed", "changed"):
                keys = c[kind]
                out[kind] = keys.count
                out[f"{kind}_keys"] = keys.all()
            return out

        return {
            "old": side(self.old),
            "new": side(self.new),
            "identical": self.identical,
            "configs": {config: {"rows": counts(c["rows"]), "qa": counts(c["qa"])} for config, c in self.configs.items()},
            "qa": counts(self.dataset),
            "flipped": {kind: items.all() for kind, items in self.flipped.items()},
            "acceptance": self.acceptance,
            "settings": self.settings,
            "summary": self.summary(),
        }


def diff_sides(old: Side, new: Side, *, scratch: Optional[Path] = None, keep: Optional[int] = None) -> DatasetDiff:
    """Compare two sides (see the module docstring for what counts as added, removed, changed).
    Both sides' rows and items go to an SQLite scratch file (``diffstore``) under ``scratch``
    (None: the system temp dir), so memory does not grow with the dataset; of each kind of
    difference the first ``keep`` are kept (None: all, for ``to_dict``), the rest counted."""
    try:
        configs, flipped, acceptance, dataset = _compare(old, new, scratch, keep)
    except sqlite3.DatabaseError as exc:  # a full disk, mostly
        raise DiffError(f"diff's scratch file under {scratch or tempfile.gettempdir()} failed ({exc}); it takes "
                        f"about {SCRATCH_BYTES_PER_ITEM:,} bytes per QA item: set TMPDIR to a folder with room") from None
    old_settings, new_settings = (card_settings(split_card(s.card, source=f"{s.spec}: {README}")[0]) if s.card else {}
                                  for s in (old, new))
    settings = {"old": old_settings, "new": new_settings, "changed": settings_changes(old_settings, new_settings)}
    return DatasetDiff(old, new, configs, flipped, acceptance, settings, dataset)


def _compare(old: Side, new: Side, scratch: Optional[Path], keep: Optional[int]) -> tuple[dict, dict, dict, dict]:
    """The per-config counts, the flips, the acceptance and the dataset's counts (``diff_sides``)."""
    with DiffStore(scratch) as store:
        for side_index, side in ((OLD, old), (NEW, new)):
            instructions = side_instructions(side)
            for config in CONFIGS:
                load_config(store, side_index, side, config, instructions)
        store.finish()
        configs = {config: {"rows": _row_counts(store, cfg, keep), "qa": _item_counts(store, cfg, keep)}
                   for cfg, config in enumerate(CONFIGS)}
        acc, rej = CONFIGS.index(ACCEPTED_CONFIG), CONFIGS.index(CONFIG_REJECTED)

        def flip(before: _Item, after: _Item) -> dict:
            out = {**_key_json(after), "family": after.family or before.family, "old": before.shown,
                   "new": after.shown}
            if before.question != after.question:
                out["old_question"] = before.question
            return out

        flipped = {
            "accepted_to_rejected": Listing.of((flip(_Item.of(o), _Item.of(n)) for o, n in store.flipped(acc, rej)), keep),
            "rejected_to_accepted": Listing.of((flip(_Item.of(o), _Item.of(n)) for o, n in store.flipped(rej, acc)), keep),
        }
        before = _acceptance(store.families(OLD, acc), store.families(OLD, rej))
        after = _acceptance(store.families(NEW, acc), store.families(NEW, rej))
        acceptance = {family: {"old": before.get(family), "new": after.get(family)}
                      for family in sorted(set(before) | set(after))}
        store.union(acc, rej)
        dataset = {"old": store.union_count(OLD), "new": store.union_count(NEW),
                   "added": Listing.of((_key_json(_Item.of(r)) for r in store.union_only_in(NEW)), keep),
                   "removed": Listing.of((_key_json(_Item.of(r)) for r in store.union_only_in(OLD)), keep),
                   "changed": Listing.of((_changed_json(_Item.of(o), _Item.of(n)) for o, n in store.union_changed()),
                                         keep)}
    return configs, flipped, acceptance, dataset


def diff(old: str, new: str, *, token: Optional[str] = None, keep: Optional[int] = None) -> DatasetDiff:
    """``orandcar diff OLD NEW``: open both sides and compare them (``keep``: see ``diff_sides``)."""
    return diff_sides(open_side(old, token=token), open_side(new, token=token), keep=keep)


# --- human output --------------------------------------------------------------------------------

def _visible(text: str) -> str:
    """``text`` with every character that does not print (beyond the ASCII space) as a JSON escape."""
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in text)


def _short(value: Any, limit: int = 60) -> str:
    """A value as the human output shows it, whitespace visible: a string as a Python literal
    (``'\\n'``, ``' '``, ``'\\xa0'``), anything else as JSON (``null``, ``2``, ``["a"]``); cut after
    ``limit`` characters, the cut marked by an ``…`` outside the quotes."""
    if isinstance(value, str):
        return repr(value[:limit]) + ("…" if len(value) > limit else "")
    text = _visible(json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr))
    return text[:limit] + "…" if len(text) > limit else text


def _where_differ(old: str, new: str, context: int = CONTEXT_CHARS) -> tuple[str, str]:
    """The part of each text where they differ, with ``context`` characters either side, as
    string literals (an ``…`` marks a cut)."""
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1

    def window(text: str) -> str:
        a, b = max(0, start - context), min(len(text), len(text) - end + context)
        return ("…" if a else "") + repr(text[a:b]) + ("…" if b < len(text) else "")

    return window(old), window(new)


def _changes(c: dict) -> str:
    return f"{c['old']:,} → {c['new']:,} (+{c['added'].count:,} -{c['removed'].count:,} ~{c['changed'].count:,})"


def _answer(shown: dict) -> str:
    if "wrong_vlm" in shown:
        return f"{_short(shown.get('wrong_vlm'), 40)} ({shown.get('reason') or 'rejected'})"
    return f"{_short(shown.get('answer'), 40)} (by {shown.get('verifier') or '?'})"


def _family_share(counts: Optional[dict]) -> str:
    if not counts:
        return "–"
    share = f"{100 * counts['share']:.1f}%" if counts.get("share") is not None else "–"
    return f"{counts['accepted']:,}/{counts['qa']:,} {share}"


def _changed_lines(changed: Listing, shown: int) -> list[str]:
    """The changed QA items of the dataset (not flipped): how many per changed part, then the
    first ``shown`` of them with what changed, and where a question changed, the changed part."""
    if not changed.count:
        return []
    parts = changed.parts
    by_part = ", ".join(f"{part} {n:,}" for part, n in sorted(parts.items(), key=lambda p: ITEM_PARTS.index(p[0])))
    lines = [f"QA items changed: {changed.count:,} (by part: {by_part})"]
    for entry in changed.kept[:shown]:
        lines.append(f"  changed ({' changed, '.join(entry['changed'])} changed)  {entry['family']}  "
                     f"{entry['dataset']}/{entry['split']}/{entry['id']}  {_short(entry['question'], 50)}")
        if "old_question" in entry:
            before, after = _where_differ(entry["old_question"], entry["question"])
            lines.append(f"      question: {before} → {after}")
    if changed.count > shown:
        lines.append(f"  ... and {changed.count - shown:,} more (--json lists them all)")
    lines.append("")
    return lines


def format_diff(result: DatasetDiff, *, flips_shown: int = FLIPS_SHOWN) -> str:
    """The short table ``orandcar diff`` prints (from a diff that kept at least ``flips_shown``
    entries of each kind: ``keep=FLIPS_SHOWN``)."""
    lines = [f"old: {result.old.describe()}", f"new: {result.new.describe()}", ""]
    width = max(len(c) for c in CONFIGS) + 2
    lines.append(f"{'config':<{width}}{'rows old → new (+added -removed ~changed)':<44}QA items old → new (+added -removed ~changed)")
    for config, c in result.configs.items():
        lines.append(f"{config:<{width}}{_changes(c['rows']):<44}{_changes(c['qa'])}")
    totals = result.totals()
    lines.append(f"{'dataset':<{width}}{'':<44}{totals['old']:,} → {totals['new']:,} (+{totals['added']:,} "
                 f"-{totals['removed']:,} ~{totals['changed']:,}; a flipped item moves between configs)")
    lines.append("")
    a2r, r2a = result.flipped["accepted_to_rejected"], result.flipped["rejected_to_accepted"]
    lines.append(f"decisions flipped: {r2a.count:,} rejected → accepted, {a2r.count:,} accepted → rejected")
    shown = [("rejected → accepted", f) for f in r2a.kept] + [("accepted → rejected", f) for f in a2r.kept]
    for label, f in shown[:flips_shown]:
        asked = "  (question changed)" if "old_question" in f else ""
        lines.append(f"  {label}  {f['family']}  {f['dataset']}/{f['split']}/{f['id']}  {_short(f['question'], 50)}"
                     f"{asked}")
        lines.append(f"      {_answer(f['old'])} → {_answer(f['new'])}")
    if r2a.count + a2r.count > flips_shown:
        lines.append(f"  ... and {r2a.count + a2r.count - flips_shown:,} more (--json lists them all)")
    lines.append("")
    lines += _changed_lines(result.dataset["changed"], flips_shown)
    lines.append("acceptance per family (accepted/QA items)")
    fwidth = max([len(f) for f in result.acceptance] + [6]) + 2
    lines.append(f"  {'family':<{fwidth}}{'old':<20}new")
    for family, sides in result.acceptance.items():
        lines.append(f"  {family:<{fwidth}}{_family_share(sides['old']):<20}{_family_share(sides['new'])}")
    lines.append("")
    changed = result.settings["changed"]
    if not result.settings["old"] or not result.settings["new"]:
        missing = [s.spec for s, block in ((result.old, result.settings["old"]), (result.new, result.settings["new"]))
                   if not block]
        lines.append(f"settings: not recorded in the card of {', '.join(missing)} (built before cards carried them)")
    if changed:
        lines.append(f"settings changed: {len(changed):,}")
        for change in changed:
            lines.append(f"  {change['key']}: {_short(change['old'])} → {_short(change['new'])}")
    elif result.settings["old"] and result.settings["new"]:
        lines.append("settings: unchanged (engine, judge, rules, extraction, cleaning policy"
                     f"{', recipe' if 'recipe' in result.settings['new'] else ''})")
    lines.append("")
    lines.append("identical" if result.identical else "the versions differ")
    return "\n".join(lines)
