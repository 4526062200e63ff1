"""The lazy registries: one lookup for engines, executors, importers and rules, with "did you
mean" on a bad name, a target of the wrong shape refused when registered, and each entry's
contract checked when it is first loaded (an error naming the entry)."""

from __future__ import annotations

import sys
import types

import pytest

from orandcar_builder.engines import ENGINES, engine_class
from orandcar_builder.errors import UnknownNameError
from orandcar_builder.executors import EXECUTORS, get_executor
from orandcar_builder.pool import IMPORTERS, get_importer
from orandcar_builder.registry import Registry, RegistryError
from orandcar_builder.verify import RULE_MODULES, get_rule, register_rule

REGISTRIES = {"engine": ENGINES, "executor": EXECUTORS, "import format": IMPORTERS, "rule": RULE_MODULES}


@pytest.fixture
def fake_module(monkeypatch):
    """Put a module made here under ``name`` in sys.modules (removed after the test)."""

    def make(name: str, **attributes) -> types.ModuleType:
        module = types.ModuleType(name)
        for key, value in attributes.items():
            setattr(module, key, value)
        monkeypatch.setitem(sys.modules, name, module)
        return module

    return make


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_every_shipped_entry_keeps_its_contract(kind):
    registry = REGISTRIES[kind]
    assert registry.kind == kind and len(registry) >= 2
    for name in registry:
        first = registry.load(name)
        assert registry._loaded[name] is first and registry.load(name) is first  # checked and kept once


@pytest.mark.parametrize("kind, lookup, wrong, meant", [
    ("engine", engine_class, "vlm", "vllm"),
    ("executor", get_executor, "locl", "local"),
    ("import format", get_importer, "llava2", "llava"),
    ("rule", get_rule, "anl", "anls"),
])
def test_a_bad_name_says_which_was_meant(kind, lookup, wrong, meant):
    with pytest.raises(UnknownNameError, match=f"unknown {kind} '{wrong}'; did you mean '{meant}'"):
        lookup(wrong)


def test_a_rule_whose_name_is_not_its_key_is_refused(monkeypatch, fake_module):
    from orandcar_builder.verify import exact

    fake_module("stand_in_rule", **{k: getattr(exact, k) for k in ("VERSION", "CONSTANTS", "score", "passes",
                                                                     "reference_score")}, NAME="exact")
    monkeypatch.setitem(RULE_MODULES, "strict", "stand_in_rule")
    with pytest.raises(RegistryError, match=r"rule 'strict' \(stand_in_rule\): its NAME is 'exact', not 'strict'"):
        get_rule("strict")
    with pytest.raises(ValueError, match="rule 'exact' registered twice"):
        register_rule("exact", "stand_in_rule")


def test_a_rule_missing_a_function_or_a_constant_is_refused(monkeypatch, fake_module):
    fake_module("half_rule", NAME="half", VERSION=1, CONSTANTS=("THRESHOLD",), score=lambda *a: 1.0,
                passes="yes")
    monkeypatch.setitem(RULE_MODULES, "half", "half_rule")
    with pytest.raises(RegistryError) as info:
        get_rule("half")
    message = str(info.value)
    assert message.startswith("rule 'half' (half_rule): ")
    assert "lacks reference_score" in message and "passes is not callable" in message
    assert "CONSTANTS names 'THRESHOLD', which it lacks" in message
    assert "half" not in RULE_MODULES._loaded  # not cached: fixed and loaded again, it is checked again


def test_an_engine_without_the_protocol_is_refused(monkeypatch, fake_module):
    class NoGenerate:
        kind = "broken"
        can_judge = False

        def fingerprint(self):
            return {}

    fake_module("broken_engine", NoGenerate=NoGenerate, not_a_class=lambda: None)
    monkeypatch.setitem(ENGINES, "broken", "broken_engine:NoGenerate")
    with pytest.raises(RegistryError, match=r"engine 'broken' \(broken_engine:NoGenerate\): lacks generate"):
        engine_class("broken")
    monkeypatch.setitem(ENGINES, "func", "broken_engine:not_a_class")
    with pytest.raises(RegistryError, match="engine 'func'.*not an engine class"):
        engine_class("func")
    monkeypatch.setitem(ENGINES, "gone", "broken_engine:Missing")
    with pytest.raises(RegistryError, match="engine 'gone'.*module broken_engine has no Missing"):
        engine_class("gone")


def test_an_executor_and_an_importer_without_their_contract_are_refused(monkeypatch, fake_module):
    class NoRun:
        name = "norun"

        def describe(self):
            return {}

    def one_argument(source):
        pass

    fake_module("broken_parts", NoRun=NoRun, one_argument=one_argument)
    monkeypatch.setitem(EXECUTORS, "norun", "broken_parts:NoRun")
    with pytest.raises(RegistryError, match=r"executor 'norun' \(broken_parts:NoRun\): lacks run"):
        get_executor("norun")
    monkeypatch.setitem(IMPORTERS, "one", "broken_parts:one_argument")
    with pytest.raises(RegistryError, match=r"import format 'one' \(broken_parts:one_argument\): takes 1 positional"):
        get_importer("one")


def test_a_target_of_the_wrong_shape_is_refused_when_registered():
    with pytest.raises(RegistryError, match="engine 'x': the target must be 'package.module:attribute'"):
        ENGINES["x"] = "orandcar_builder.engines.replay"  # no attribute
    with pytest.raises(RegistryError, match="rule 'x': the target must be a module path"):
        RULE_MODULES["x"] = "orandcar_builder.verify.exact:score"
    with pytest.raises(RegistryError, match="name must be a non-empty string"):
        EXECUTORS[""] = "orandcar_builder.executors.local:LocalExecutor"
    assert "x" not in ENGINES and "x" not in RULE_MODULES


def test_a_missing_module_names_the_entry_but_a_missing_dependency_is_its_own_error(fake_module):
    registry = Registry("widget", {"gone": "no_such_package_here.widgets:Widget"})
    with pytest.raises(RegistryError, match=r"widget 'gone' \(no_such_package_here.widgets:Widget\): no module"):
        registry.load("gone")
    registry["dep"] = "tests.registry_needs_dep:Widget"
    with pytest.raises(ModuleNotFoundError, match="a_dependency_not_installed"):
        registry.load("dep")


def test_replacing_an_entry_forgets_what_was_loaded(monkeypatch, fake_module):
    registry = Registry("widget", check=lambda name, obj: [] if obj.size > 0 else ["size must be positive"])
    fake_module("widgets_a", Widget=types.SimpleNamespace(size=1), Bad=types.SimpleNamespace(size=0))
    registry["w"] = "widgets_a:Widget"
    assert registry.load("w").size == 1
    registry["w"] = "widgets_a:Bad"
    with pytest.raises(RegistryError, match=r"widget 'w' \(widgets_a:Bad\): size must be positive"):
        registry.load("w")
    del registry["w"]
    with pytest.raises(UnknownNameError, match="unknown widget 'w'"):
        registry.load("w")
    assert list(registry) == [] and "w" not in registry and ["unhashable"] not in registry
