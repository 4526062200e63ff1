"""The settings of one build (``BuildConfig``), checked in one place, and the live objects a
caller may hand the build instead of names (``BuildObjects``).

``BuildConfig`` holds only values (names, numbers, paths, the family registry and the card
options): it can be printed, compared and recorded. An engine instance a test builds, an
engine factory for Ray replicas or an executor object are not settings; they travel beside the
config in ``BuildObjects`` and, where given, are used instead of the config's names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from ..dataset.writer import DEFAULT_MAX_SHARD_BYTES
from ..errors import OrandCarError
from ..families import DEFAULT_FAMILIES, Families, Family
from ..images import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_READ_TIMEOUT_S, ImagePolicy
from ..pool.prefetch import check_workers, default_workers
from ..recipe import DEFAULT_ENGINE, DEFAULT_JUDGE, Recipe
from ..vocab import GENERATION_BATCH

# More than this share of the admitted items without an answer makes a failed build (pipeline/failure.py).
DEFAULT_MAX_FAILED_SHARE = 0.5


class BuildError(OrandCarError):
    pass


@dataclass(frozen=True)
class BuildConfig:
    """Every setting of one build. ``check()`` (run on construction) refuses a bad value with a
    BuildError naming it; ``with_recipe`` fills the engine, judge, calibration, families and card
    settings from a resolved recipe.

    ``judge`` names the second-pass engine: ``"none"`` (no second pass), ``"same"`` (the
    generation engine, text only) or an engine name built with ``judge_options``.
    ``calibrate`` runs the judge over that many rule-accepted items. ``executor`` says where
    generation runs: ``"local"`` or ``"ray"`` (``ray_address``, ``engine_replicas`` actors with
    ``gpus_per_replica`` GPUs each). ``max_image_bytes``, ``image_read_timeout`` and
    ``allow_outside_paths`` make the ImagePolicy; ``admit_workers`` processes check the pool's
    images (None: ``pool.prefetch.default_workers()``); on the local executor admission
    overlaps generation unless ``overlap_admit`` is False, and then runs on a process of its own
    as ``admit_process`` says (None: for a large pool with two or more admission processes;
    ``stages.admit.Admission.on_process``); the local executor decides the answered items on a
    process of its own as ``decide_process`` says (None: for a large pool on two or more CPUs;
    ``executors.decider.on_process``). Beyond ``max_failed_share`` of the
    admitted items without an answer the build is a failed build and the old dataset stays
    (``failure.py``). ``families`` is the build's family registry (a ``families.Families``
    value: the code's ``DEFAULT_FAMILIES`` unless a recipe changes them; ``Family`` records given
    instead are laid over the code's), handed to every part that asks or decides; ``card_options`` (``card.CardOptions`` keywords) and ``repo``
    come from the recipe; ``recipe`` is the resolved recipe itself, recorded in the manifest and
    the card (None: the code's defaults with the settings above).
    """

    pool: Path
    out: Path
    work: Path = Path("work")
    engine: str = DEFAULT_ENGINE
    engine_options: Mapping[str, Any] = field(default_factory=dict)
    judge: str = DEFAULT_JUDGE
    judge_options: Mapping[str, Any] = field(default_factory=dict)
    calibrate: int = 0
    limit: Optional[int] = None
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    progress: bool = True
    use_cache: bool = True
    export_generations: Optional[Path] = None
    generation_batch: int = GENERATION_BATCH
    executor: str = "local"
    ray_address: Optional[str] = None
    engine_replicas: int = 1
    gpus_per_replica: float = 0.0
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    image_read_timeout: float = DEFAULT_READ_TIMEOUT_S
    allow_outside_paths: bool = False
    admit_workers: Optional[int] = None
    overlap_admit: bool = True
    admit_process: Optional[bool] = None
    decide_process: Optional[bool] = None
    max_failed_share: float = DEFAULT_MAX_FAILED_SHARE
    families: Families = DEFAULT_FAMILIES
    card_options: Mapping[str, Any] = field(default_factory=dict)
    repo: Optional[str] = None
    recipe: Optional[Recipe] = None

    def __post_init__(self) -> None:
        for name in ("pool", "out", "work"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        if self.export_generations is not None:
            object.__setattr__(self, "export_generations", Path(self.export_generations))
        for name in ("engine_options", "judge_options", "card_options"):
            object.__setattr__(self, name, dict(getattr(self, name) or {}))
        object.__setattr__(self, "families", _families(self.families))
        self.check()

    def check(self) -> None:
        """Refuse settings no build can run with (a BuildError naming the setting)."""
        limit = self.limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise BuildError(f"limit must be a whole number of pool lines, 0 or more, not {limit!r}")
        if isinstance(self.generation_batch, bool) or not isinstance(self.generation_batch, int) \
                or self.generation_batch < 1:
            raise BuildError(f"generation_batch must be at least 1, got {self.generation_batch}")
        if isinstance(self.calibrate, bool) or not isinstance(self.calibrate, int) or self.calibrate < 0:
            raise BuildError(f"calibrate must be a whole number of items, 0 or more, not {self.calibrate!r}")
        if not isinstance(self.executor, str):
            raise BuildError(f"executor must be a name (local, ray), not {self.executor!r}; pass an Executor "
                             "object in BuildObjects")
        share = self.max_failed_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise BuildError(f"max_failed_share must be a share of the admitted items from 0 to 1, not {share!r}")
        if self.max_shard_bytes is None or self.max_shard_bytes < 1:
            raise BuildError(f"max_shard_bytes must be at least 1, got {self.max_shard_bytes!r}")
        try:
            self.image_policy()
            if self.admit_workers is not None:
                check_workers(self.admit_workers)
        except ValueError as exc:
            raise BuildError(str(exc)) from None

    # -- derived settings --------------------------------------------------------------------

    def image_policy(self) -> ImagePolicy:
        return ImagePolicy(self.max_image_bytes, self.image_read_timeout, self.allow_outside_paths)

    def workers(self) -> int:
        """The admission's image-checking processes."""
        try:
            return check_workers(self.admit_workers if self.admit_workers is not None else default_workers())
        except ValueError as exc:
            raise BuildError(str(exc)) from None

    def replace(self, **changes: Any) -> "BuildConfig":
        return dataclasses.replace(self, **changes)

    # -- the recipe ----------------------------------------------------------------------------

    def with_recipe(self, recipe: Optional[Recipe], *, keep_engine: bool = False,
                    keep_judge: bool = False) -> "BuildConfig":
        """This config with a resolved recipe's (``recipe.resolve``) engine, judge, calibration,
        families, card options and repo. ``keep_engine``/``keep_judge``: the caller gives that
        engine as an object (BuildObjects), so this config's name and options stay."""
        if recipe is None:
            return self
        changes = recipe.build_settings()
        for kept, names in ((keep_engine, ("engine", "engine_options")), (keep_judge, ("judge", "judge_options"))):
            if kept:
                for name in names:
                    changes.pop(name, None)
        return self.replace(recipe=recipe, **changes)

    @classmethod
    def from_recipe(cls, recipe: Recipe, pool: Path, out: Path, **settings: Any) -> "BuildConfig":
        """The config of a build of ``pool`` into ``out`` that runs ``recipe`` (``settings``: the
        other fields)."""
        return cls(pool=pool, out=out, **settings).with_recipe(recipe)


def _families(given: Any) -> Families:
    """The registry a config carries: a ``Families`` value as it is, ``None`` the code's own, an
    iterable of ``Family`` records laid over the code's; anything else is a BuildError."""
    if isinstance(given, Families):
        return given
    if given is None:
        return DEFAULT_FAMILIES
    records = list(given) if isinstance(given, (tuple, list)) else None
    if records is None or not all(isinstance(f, Family) for f in records):
        raise BuildError(f"families must be a families.Families value or families.Family records, not {given!r}")
    try:
        return DEFAULT_FAMILIES.overlay(records)
    except ValueError as exc:
        raise BuildError(str(exc)) from None


@dataclass(frozen=True)
class BuildObjects:
    """Live objects used instead of the config's names: an ``engine`` (its fingerprint keys the
    cache), a ``judge_engine``, an ``engine_factory`` (anything picklable with ``create()``: where
    Ray replicas make their engines; its engines must have the build engine's fingerprint) and an
    ``executor`` object."""

    engine: Any = None
    judge_engine: Any = None
    engine_factory: Any = None
    executor: Any = None
