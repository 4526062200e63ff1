"""Build recipes: one TOML file that says how a release of the dataset is made.

A recipe names the dataset (its Hub repo, license, access form and other card options), the engine
that answers and its options, the judge and its options, the calibration size, how the build runs
(``[build]``: the share of failed items beyond which it is a failed build), and the families:
for each, the instruction appended to its questions, the separator between question and
instruction, and the rule that decides its answers. A family the code does not know is added by
giving an instruction and an existing rule; no code is needed.

The file is read with the standard library's ``tomllib`` and checked against ``RECIPE_SCHEMA``
(JSON Schema, draft 2020-12) with ``jsonschema``; names the schema cannot know (rules, engines)
are checked against the registries, and a family name against the dataset's own row schemas
(``dataset/schemas``), which publish it: a name the dataset refuses is found when the recipe is
read, not at validation after the whole generation. Every problem names the key and the line it is on, with a
"did you mean" for a misspelt key or name; all problems are reported at once.

``orandcar build --recipe FILE`` resolves a recipe (command-line flags override it; ``--engine``
replaces its whole engine section), records the resolved recipe in work/manifest.json and the
card, and renders the card's "How to reproduce" section from it.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Optional

from .errors import OrandCarError
from .families import DEFAULT_FAMILIES, DEFAULT_SEPARATOR, Families, Family
from .files import MAX_JSON_DEPTH, deeper_than

try:
    import tomllib  # the standard library's TOML reader, Python 3.11+
except ModuleNotFoundError:  # pragma: no cover - Python 3.10: the same reader as a package
    import tomli as tomllib

RECIPE_FORMAT = 1  # the ``format`` a recipe declares; a later, incompatible layout gets a new number
SHIPPED_RECIPE = "orandcar.toml"  # recipes/orandcar.toml: the published dataset's recipe
CPU_RECIPE = "cpu.toml"  # recipes/cpu.toml: its CPU counterpart (engine rapidocr, no judge)
DEFAULTS_SOURCE = "(defaults)"  # the source of the recipe a build without a recipe file runs

_SCALAR = {"type": ["string", "number", "boolean"]}
_OPTION_VALUE = {"anyOf": [_SCALAR, {"type": "array"}, {"type": "object"}]}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_GATED_FIELD = {"anyOf": [
    {"enum": ["text", "checkbox", "date_picker", "country"]},
    {"type": "object", "properties": {"type": {"const": "select"}, "options": _STRINGS},
     "required": ["type", "options"], "additionalProperties": False},
]}

RECIPE_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "OrandCar build recipe",
    "type": "object",
    "properties": {
        "format": {"const": RECIPE_FORMAT},
        "dataset": {
            "type": "object",
            "properties": {
                "repo": {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"},
                "pretty_name": {"type": "string", "minLength": 1},
                "license": {"type": "string", "minLength": 1},
                "license_name": {"type": "string"},
                "license_link": {"type": "string"},
                "language": _STRINGS,
                "task_categories": _STRINGS,
                "tags": _STRINGS,
                "gated": {"type": "boolean"},
                "gated_heading": {"type": "string"},
                "gated_prompt": {"type": "string", "minLength": 1},
                "gated_fields": {"type": "object", "additionalProperties": _GATED_FIELD},
                "gated_button": {"type": "string", "minLength": 1},
            },
            "additionalProperties": False,
        },
        "engine": {
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1}},
            "required": ["name"],
            "additionalProperties": _OPTION_VALUE,  # the engine's own options (model, max_tokens, ...)
        },
        "judge": {
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1}},
            "required": ["name"],
            "additionalProperties": _OPTION_VALUE,
        },
        "calibration": {
            "type": "object",
            "properties": {"size": {"type": "integer", "minimum": 0}},
            "additionalProperties": False,
        },
        "build": {
            "type": "object",
            # beyond this share of admitted items without an answer the build fails (pipeline/failure.py)
            "properties": {"max_failed_share": {"type": "number", "minimum": 0, "maximum": 1}},
            "additionalProperties": False,
        },
        "families": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "instruction": {"type": "string"},
                    "separator": {"type": "string"},
                    "rule": {"type": "string", "minLength": 1},
                    "description": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
    },
    "additionalProperties": False,
}
JUDGE_NAMES = ("none", "same")  # besides the engine names


class RecipeError(OrandCarError):
    """A recipe that cannot be used; the message lists every problem with its key and line."""


@dataclass(frozen=True)
class FamilySettings:
    """What a recipe says about one family."""

    name: str
    rule: str
    instruction: str
    separator: str = DEFAULT_SEPARATOR
    description: str = ""

    def to_dict(self) -> dict:
        out = {"rule": self.rule, "instruction": self.instruction, "separator": self.separator}
        if self.description:
            out["description"] = self.description
        return out


def dataset_repo(dataset: dict) -> Optional[str]:
    """The Hub repo a recipe's dataset section names (None where it names none)."""
    return dataset.get("repo")


def dataset_card_options(dataset: dict) -> dict:
    """A recipe's dataset section without ``repo``: the keyword arguments of ``card.CardOptions``.
    Also read back from a build report's recorded recipe (``card.rewrite_card``)."""
    return {k: v for k, v in dataset.items() if k != "repo"}


@dataclass(frozen=True)
class Recipe:
    """A checked recipe. ``families`` holds every family the build knows, the code's own with the
    recipe's changes applied, in the code's order and then the recipe's new ones."""

    source: str  # the file it was read from, as given
    dataset: dict = field(default_factory=dict)
    engine: Optional[dict] = None  # {"name": ..., options...}
    judge: Optional[dict] = None
    calibration: Optional[int] = None
    families: dict[str, FamilySettings] = field(default_factory=dict)
    build: dict = field(default_factory=dict)  # how the build runs ([build]: max_failed_share)
    changed_families: tuple[str, ...] = ()  # the families the recipe named

    @property
    def repo(self) -> Optional[str]:
        return dataset_repo(self.dataset)

    def card_options(self) -> dict:
        """The dataset section without ``repo``: the keyword arguments of ``card.CardOptions``."""
        return dataset_card_options(self.dataset)

    def family_registry(self) -> Families:
        """The families as a registry value (``families.Families``): the code's own with this
        recipe's changes, and its new families after them; what the build config carries."""
        code = DEFAULT_FAMILIES
        return code.overlay(Family(name=f.name, rule=f.rule, instruction=f.instruction, separator=f.separator,
                                   description=f.description or (code[f.name].description if f.name in code else ""))
                            for f in self.families.values())

    def with_families(self, families: Families) -> "Recipe":
        """This recipe with the family registry ``families`` (a ``BuildConfig``'s, which may have
        been given without a recipe): every family it holds, those that differ from the code's
        named as changed, so the card records what the build asked and decided with."""
        code = DEFAULT_FAMILIES
        settings = {name: FamilySettings(name=name, rule=f.rule, instruction=f.instruction, separator=f.separator,
                                         description="" if name in code and f.description == code[name].description
                                         else f.description)
                    for name, f in families.items()}
        changed = tuple(name for name, f in families.items() if code.get(name) != f)
        return replace(self, families=settings, changed_families=changed)

    def build_settings(self) -> dict[str, Any]:
        """What this recipe sets of a build, by ``build.BuildConfig`` field: the engine and judge
        (names and options; a section the recipe leaves out is not set), the calibration size,
        the families (a ``families.Families`` value), the card options, the repo and the ``[build]``
        settings (``max_failed_share``) the recipe gives."""
        settings: dict[str, Any] = {"calibrate": self.calibration or 0, "families": self.family_registry(),
                                    "card_options": self.card_options(), "repo": self.repo}
        if self.engine is not None:
            settings.update(engine=self.engine["name"], engine_options=options_of(self.engine))
        if self.judge is not None:
            settings.update(judge=self.judge["name"], judge_options=options_of(self.judge))
        settings.update(self.build)
        return settings

    def to_dict(self) -> dict:
        """The recipe as resolved (what work/manifest.json and the card record)."""
        out: dict[str, Any] = {"format": RECIPE_FORMAT}
        if self.dataset:
            out["dataset"] = dict(self.dataset)
        if self.engine is not None:
            out["engine"] = dict(self.engine)
        if self.judge is not None:
            out["judge"] = dict(self.judge)
        if self.calibration is not None:
            out["calibration"] = {"size": self.calibration}
        if self.build:
            out["build"] = dict(self.build)
        out["families"] = {name: f.to_dict() for name, f in self.families.items()}
        return out


# --- where a key is in the file -------------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*("[^"]*"|'[^']*'|[A-Za-z0-9_.\-"' ]+?)\s*=""")


def _parts(dotted: str) -> list[str]:
    """The parts of a TOML dotted key (quoted parts kept whole)."""
    return [p.strip().strip("\"'") for p in re.findall(r"""\s*("[^"]*"|'[^']*'|[^.]+)\s*(?:\.|$)""", dotted) if p.strip()]


def key_line(text: str, path: Iterable[str]) -> Optional[int]:
    """The 1-based line of the key ``path`` in the TOML ``text``: the ``[table]`` header for a
    table, the ``key =`` line for a value (also dotted keys and keys inside a parent table's
    header); None when it is not written on a line of its own (an inline table)."""
    path = [str(p) for p in path]
    if not path:
        return None
    table: list[str] = []
    best = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _parts(header.group(1))
            if table == path and best is None:
                best = number
            continue
        key = _KEY.match(line)
        if key:
            full = table + _parts(key.group(1))
            if full == path:
                return number
            if best is None and full[:len(path)] == path:  # a dotted key inside the wanted table
                best = number
    return best


def _where(text: str, path: list) -> str:
    names = [str(p) for p in path]
    line = key_line(text, names)
    while line is None and names:
        names = names[:-1]
        line = key_line(text, names)
    return f"line {line}" if line else "line ?"


def _table(path: list) -> str:
    return "[" + ".".join(str(p) for p in path) + "]" if path else "the top level"


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "an array",
               dict: "a table"}


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _schema_problems(data: dict, text: str) -> list[tuple[int, str]]:
    from jsonschema import Draft202012Validator

    problems = []
    for error in Draft202012Validator(RECIPE_SCHEMA).iter_errors(data):
        path = list(error.absolute_path)
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = list((error.schema.get("properties") or {}))
            for key in error.instance:
                if key not in known:
                    where = _where(text, path + [key])
                    problems.append((where, f"{where}: unknown key {key!r} in {_table(path)}"
                                            f"{_did_you_mean(key, known)} (known: {', '.join(known)})"))
            continue
        where = _where(text, path)
        name = ".".join(str(p) for p in path) or "the recipe"
        if error.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            problems.append((where, f"{where}: {_table(path)} needs {missing[0] if missing else error.message!r}"))
        elif error.validator == "type":
            wanted = error.validator_value
            wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
            problems.append((where, f"{where}: {name} must be {_article(wanted)}, not {_type_name(error.instance)} "
                                    f"({error.instance!r})"))
        elif error.validator == "const" and path == ["format"]:
            problems.append((where, f"{where}: format {error.instance!r} is not a recipe format this version reads "
                                    f"(it reads format {RECIPE_FORMAT})"))
        elif path[:2] == ["dataset", "gated_fields"]:
            problems.append((where, f"{where}: {name} must be one of text, checkbox, date_picker, country, or "
                                    f"{{type = \"select\", options = [...]}}, not {error.instance!r}"))
        else:
            problems.append((where, f"{where}: {name}: {error.message}"))
    return problems


def _article(type_name: str) -> str:
    return {"integer": "an integer", "object": "a table", "array": "an array", "string": "a string",
            "boolean": "true or false", "number": "a number"}.get(type_name, type_name)


# --- reading -------------------------------------------------------------------------------------

def read_recipe(path: str | Path) -> Recipe:
    """Read, check and resolve the recipe file ``path``; a RecipeError lists every problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError(f"{path}: cannot read the recipe ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise RecipeError(f"{path}: the recipe is not UTF-8 text") from None
    return parse_recipe(text, source=str(path))


def parse_recipe(text: str, *, source: str = "recipe") -> Recipe:
    """The recipe in the TOML ``text`` (``source`` names it in messages)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:
        raise RecipeError(f"{source}: not read: it is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:  # tomllib's int() of an integer past Python's digit limit
        raise RecipeError(f"{source}: not read: it holds an integer of more than "
                          f"{sys.get_int_max_str_digits():,} digits") from None
    if deeper_than(data, MAX_JSON_DEPTH):
        raise RecipeError(f"{source}: not read: it is nested deeper than {MAX_JSON_DEPTH} levels") from None
    problems = _schema_problems(data, text) + _name_problems(data, text)
    if problems:
        problems.sort(key=lambda p: (int(p[0].split()[1]) if p[0].split()[1].isdigit() else 10**9))
        listed = "; ".join(message for _, message in problems)
        raise RecipeError(f"{source}: {len(problems)} problem(s): {listed}")
    return _resolve(data, source)


def _name_problems(data: dict, text: str) -> list[tuple[str, str]]:
    """Names the schema cannot know: engines, judges and rules, checked against the registries."""
    from .engines import ENGINES
    from .verify import RULE_MODULES

    problems = []
    for section, extra in (("engine", ()), ("judge", JUDGE_NAMES)):
        table = data.get(section)
        name = table.get("name") if isinstance(table, dict) else None
        if not isinstance(name, str):
            continue
        known = [*extra, *ENGINES]
        if name not in known:
            where = _where(text, [section, "name"])
            problems.append((where, f"{where}: unknown {section} {name!r}{_did_you_mean(name, known)} "
                                    f"(known: {', '.join(known)})"))
        elif name in ENGINES:
            problems += _option_problems(section, name, table, text)
    families = data.get("families")
    for family, settings in (families.items() if isinstance(families, dict) else ()):
        if not isinstance(settings, dict):
            continue
        rule = settings.get("rule")
        if isinstance(rule, str) and rule not in RULE_MODULES:
            where = _where(text, ["families", family, "rule"])
            problems.append((where, f"{where}: family {family!r}: unknown rule {rule!r}"
                                    f"{_did_you_mean(rule, RULE_MODULES)} (known: {', '.join(sorted(RULE_MODULES))})"))
        problems += _published_name_problems(family, text)
        if family not in DEFAULT_FAMILIES:
            missing = [k for k in ("instruction", "rule") if k not in settings]
            if missing:
                where = _where(text, ["families", family])
                close = _did_you_mean(family, DEFAULT_FAMILIES)
                problems.append((where, f"{where}: family {family!r} is not one the code knows{close}; a new family "
                                        f"needs {' and '.join(missing)} (an instruction and an existing rule)"))
    return problems


def _published_name_schemas() -> list[tuple[str, dict]]:
    """(where in a row, its JSON Schema) of each place a recipe's family name is published: the
    ``family`` of ``clean_meta.sources`` in every config's schema (dataset/schemas), so a name the
    dataset would refuse at validation is refused when the recipe is read."""
    from .dataset.validate import json_schema
    from .vocab import CONFIGS

    out = []
    for config in CONFIGS:
        meta = json_schema(config)["properties"]["clean_meta"]["properties"]
        out.append((f"{config}: clean_meta.sources.family", meta["sources"]["items"]["properties"]["family"]))
    return out


def _schema_error(schema: dict, value: Any) -> Optional[str]:
    from jsonschema import Draft202012Validator

    error = next(Draft202012Validator(schema).iter_errors(value), None)
    return None if error is None else error.message


def _published_name_problems(family: str, text: str) -> list[tuple[str, str]]:
    for place, schema in _published_name_schemas():
        error = _schema_error(schema, family)
        if error is not None:
            where = _where(text, ["families", family])
            fixed = re.sub(r"^[^a-z]+", "", re.sub(r"[^a-z0-9_]+", "_", family.lower()).strip("_"))
            hint = f"; did you mean {fixed!r}?" if fixed and _schema_error(schema, fixed) is None else ""
            return [(where, f"{where}: family name {family!r} cannot be published: the dataset schema refuses it "
                            f"({place}: {error}){hint}")]
    return []


def engine_parameters(name: str) -> Optional[list[str]]:
    """The option names engine ``name`` takes (its constructor's keyword parameters), or None when
    it takes any."""
    import inspect

    from .engines import engine_class

    cls = engine_class(name)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return [p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                     inspect.Parameter.KEYWORD_ONLY)]


def _option_problems(section: str, engine: str, table: dict, text: str) -> list[tuple[str, str]]:
    known = engine_parameters(engine)
    if known is None:
        return []
    problems = []
    for key in table:
        if key != "name" and key not in known:
            where = _where(text, [section, key])
            problems.append((where, f"{where}: unknown option {key!r} of the {engine} engine in [{section}]"
                                    f"{_did_you_mean(key, known)} (known: {', '.join(known)})"))
    return problems


def _resolve(data: dict, source: str) -> Recipe:

    given = data.get("families") or {}
    families = {}
    for name, family in DEFAULT_FAMILIES.items():
        settings = given.get(name, {})
        families[name] = FamilySettings(
            name=name, rule=settings.get("rule", family.rule),
            instruction=settings.get("instruction", family.instruction),
            separator=settings.get("separator", DEFAULT_SEPARATOR),
            description=settings.get("description", ""))
    for name, settings in given.items():
        if name not in DEFAULT_FAMILIES:
            families[name] = FamilySettings(name=name, rule=settings["rule"], instruction=settings["instruction"],
                                            separator=settings.get("separator", DEFAULT_SEPARATOR),
                                            description=settings.get("description", ""))
    calibration = (data.get("calibration") or {}).get("size")
    return Recipe(source=source, dataset=dict(data.get("dataset") or {}),
                  engine=dict(data["engine"]) if "engine" in data else None,
                  judge=dict(data["judge"]) if "judge" in data else None,
                  calibration=calibration, families=families, changed_families=tuple(given),
                  build=dict(data.get("build") or {}))


def shipped_recipe_path(name: str = SHIPPED_RECIPE) -> Path:
    """``recipes/NAME`` (the published recipe unless named) as installed with the package, else
    the one of this checkout."""
    from .shipped import shipped_dir

    return shipped_dir("recipes") / name


# --- resolving against the command line ------------------------------------------------------------

DEFAULT_ENGINE = "rapidocr"
DEFAULT_JUDGE = "none"


def resolve(recipe: Optional[Recipe], *, engine: Optional[str] = None, engine_options: Optional[dict] = None,
            judge: Optional[str] = None, judge_options: Optional[dict] = None, calibration: Optional[int] = None,
            repo: Optional[str] = None) -> Recipe:
    """The recipe a build runs: ``recipe`` (or the code's defaults) with the command line over it.

    ``engine`` (given on the command line) replaces the recipe's whole engine section, options
    included; ``engine_options`` alone are merged over the recipe's. The same holds for ``judge``
    and ``judge_options``. ``calibration`` and ``repo`` replace the recipe's values when given; a
    judge turned off (``none``) leaves no calibration unless ``calibration`` asks for one.
    """
    if recipe is None:
        recipe = _resolve({}, DEFAULTS_SOURCE)
    engine_section = ({"name": engine} if engine is not None
                      else dict(recipe.engine) if recipe.engine is not None else {"name": DEFAULT_ENGINE})
    engine_section.update(engine_options or {})
    judge_section = ({"name": judge} if judge is not None
                     else dict(recipe.judge) if recipe.judge is not None else {"name": DEFAULT_JUDGE})
    judge_section.update(judge_options or {})
    dataset = dict(recipe.dataset)
    if repo is not None:
        dataset["repo"] = repo
    size = calibration if calibration is not None else recipe.calibration if recipe.calibration is not None else 0
    if calibration is None and judge_section["name"] == DEFAULT_JUDGE:
        size = 0  # the judge was turned off over the recipe: nothing left to calibrate
    return Recipe(source=recipe.source, dataset=dataset, engine=engine_section, judge=judge_section,
                  calibration=size, families=dict(recipe.families), changed_families=recipe.changed_families,
                  build=dict(recipe.build))


def options_of(section: dict) -> dict:
    """An engine or judge section without its ``name``: the engine's keyword options."""
    return {k: v for k, v in section.items() if k != "name"}


# --- writing TOML (tomllib only reads; tomli_w is its writer) -------------------------------------

def _without_none(value: Any) -> Any:
    """``value`` with every None left out, at any depth (TOML has no null)."""
    if isinstance(value, dict):
        return {str(k): _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value if v is not None]
    return value


def to_toml(data: dict) -> str:
    """``data`` (a resolved recipe) as TOML text that ``tomllib`` reads back equal, written by
    ``tomli_w``: top-level values first, then one ``[table]`` per section, one ``[families.NAME]``
    per family, and a sub-table for each deeper mapping. ``None`` values are left out."""
    import tomli_w

    return tomli_w.dumps(_without_none(data))
