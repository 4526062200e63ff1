"""Lazy registries: a name -> where its code lives, imported on first use, checked on load.

The package's four registries (``engines.ENGINES``, ``executors.EXECUTORS``, ``pool.IMPORTERS``,
``verify.RULE_MODULES``) are ``Registry`` values. An entry's target is ``"package.module:attribute"``
(a class or a function) or, for a registry of modules, ``"package.module"``; nothing is imported
until the entry is first loaded, so a heavy optional dependency costs nothing to a run that does
not use it. One lookup serves them all:

- an unknown name is an ``UnknownNameError`` with "did you mean" (``"unknown engine 'vlm'; did you
  mean 'vllm'?"``);
- a target of the wrong shape is refused when it is registered (``RegistryError``);
- the loaded object is checked against the registry's contract on first load (a rule module's
  ``NAME`` is its key, an engine class has the Engine protocol's attributes, an importer is a
  function taking a source and a writer); a broken one is a ``RegistryError`` naming the entry.

A registry is a mapping name -> target text (what ``--help`` lists, and what
``tests/test_imports.py`` reads); ``registry[name] = target`` (or ``register``) adds an entry and
``del registry[name]`` removes it.
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Callable, Iterable, Iterator, MutableMapping, Optional

from .errors import OrandCarError, UnknownNameError

# A dotted module path, e.g. "orandcar_builder.engines.vllm".
_MODULE = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_ATTRIBUTE = r"[A-Za-z_][A-Za-z0-9_]*"

# A contract check: the problems of a loaded entry (none: it keeps the contract).
Check = Callable[[str, Any], Iterable[str]]


class RegistryError(OrandCarError, TypeError):
    """A registry entry that breaks its registry's contract; the message names the entry."""


class Registry(MutableMapping[str, str]):
    """Entries of one kind (``kind``: "engine", "rule", ...), name -> target, in registration
    order. ``attribute``: targets name an attribute of a module (``module:attribute``), else a
    module. ``check(name, loaded)`` gives the contract's problems with a loaded entry."""

    def __init__(self, kind: str, entries: Optional[dict[str, str]] = None, *, attribute: bool = True,
                 check: Optional[Check] = None):
        self.kind, self.attribute, self.check = kind, attribute, check
        self._targets: dict[str, str] = {}
        self._loaded: dict[str, Any] = {}
        for name, target in (entries or {}).items():
            self[name] = target

    # -- the mapping: name -> target ------------------------------------------------------------

    def __getitem__(self, name: str) -> str:
        try:
            return self._targets[name]
        except (KeyError, TypeError):
            raise UnknownNameError(self.kind, str(name), self._targets) from None

    def __setitem__(self, name: str, target: str) -> None:
        self._targets[self._checked_name(name)] = self._checked_target(name, target)
        self._loaded.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._targets[name]
        self._loaded.pop(name, None)

    def __contains__(self, name: object) -> bool:
        try:
            return name in self._targets
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._targets)

    def __len__(self) -> int:
        return len(self._targets)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self._targets!r})"

    def register(self, name: str, target: str) -> None:
        """Add ``name`` -> ``target``; the same name registered again to another target is refused."""
        if name in self._targets and self._targets[name] != target:
            raise ValueError(f"{self.kind} {name!r} registered twice ({self._targets[name]} and {target})")
        self[name] = target

    # -- loading -------------------------------------------------------------------------------

    def load(self, name: str) -> Any:
        """The object ``name`` names, imported on first use and checked against the contract
        (UnknownNameError for an unknown name, RegistryError for an entry that breaks it)."""
        if name in self._loaded:
            return self._loaded[name]
        target = self[name]
        module_path, _, attribute = target.partition(":")
        try:
            module = importlib.import_module(module_path)
        except ModuleNotFoundError as exc:
            if exc.name is not None and (module_path + ".").startswith(exc.name + "."):  # the target, not a dependency
                raise self._error(name, f"no module {module_path}") from None
            raise
        loaded = module
        if attribute:
            loaded = getattr(module, attribute, None)
            if loaded is None:
                raise self._error(name, f"module {module_path} has no {attribute}")
        problems = list(self.check(name, loaded)) if self.check is not None else []
        if problems:
            raise self._error(name, "; ".join(problems))
        self._loaded[name] = loaded
        return loaded

    # -- checks --------------------------------------------------------------------------------

    def _error(self, name: str, problem: str) -> RegistryError:
        return RegistryError(f"{self.kind} {name!r} ({self._targets[name]}): {problem}")

    def _checked_name(self, name: object) -> str:
        if not isinstance(name, str) or not name.strip():
            raise RegistryError(f"a {self.kind} name must be a non-empty string, not {name!r}")
        return name

    def _checked_target(self, name: str, target: object) -> str:
        shape = f"{_MODULE}:{_ATTRIBUTE}" if self.attribute else _MODULE
        if not isinstance(target, str) or not re.fullmatch(shape, target):
            form = "'package.module:attribute'" if self.attribute else "a module path 'package.module'"
            raise RegistryError(f"{self.kind} {name!r}: the target must be {form}, not {target!r}")
        return target


# -- contract checks shared by the registries ---------------------------------------------------


def missing_attributes(loaded: Any, names: Iterable[str], *, callables: Iterable[str] = ()) -> list[str]:
    """The problems of ``loaded`` lacking any of ``names``, or having one of ``callables`` that is
    not callable: one line each."""
    problems = [f"lacks {name}" for name in names if not hasattr(loaded, name)]
    problems += [f"{name} is not callable" for name in callables
                 if hasattr(loaded, name) and not callable(getattr(loaded, name))]
    return problems


def named_as_registered(name: str, loaded: Any, attribute: str = "NAME") -> list[str]:
    """The problem of an entry whose own name (``attribute``) is not the name it is registered
    under: the two spellings must agree."""
    own = getattr(loaded, attribute, None)
    if own is not None and own != name:
        return [f"its {attribute} is {own!r}, not {name!r} as registered"]
    return []
