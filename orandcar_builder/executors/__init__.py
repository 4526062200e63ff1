"""Executors: where the generation stage (generate, then decide) runs.

``local`` runs it in this process; ``ray`` runs it on a Ray cluster (one engine per actor). Both
take the admitted rows as they are admitted (``streams_admission``; else they read
``work/admitted.parquet``) and yield ``DecidedChunk``s in the order generations finish, which the build writes and sorts into pool order
(``ordering.sort_by_order``) as ``work/decisions.parquet``; the steps they run (``steps.py``) do not know
where they run, and the stages after generation (judge, route, write) are the same for both.
"""

from __future__ import annotations

from typing import Any

from ..registry import Registry, missing_attributes
from .base import DecidedChunk, EngineFactory, Executor, GenerationJob
from .generation import generate_through_cache


def _executor_contract(name: str, cls: Any) -> list[str]:
    """An executor is a class with the Executor protocol's attributes (``executors.base.Executor``)."""
    if not isinstance(cls, type):
        return [f"is {type(cls).__name__}, not an executor class"]
    return missing_attributes(cls, ("name", "run", "describe"), callables=("run", "describe"))


# name -> "module:class"; imported on use so that ray is imported only by the ray executor.
EXECUTORS = Registry("executor", {
    "local": "orandcar_builder.executors.local:LocalExecutor",
    "ray": "orandcar_builder.executors.ray_data:RayExecutor",
}, check=_executor_contract)


def _executor_class(name: str) -> type:
    """The class registered as ``name``, imported now; an unknown name says which was meant."""
    return EXECUTORS.load(name)


def executor_for(name: str, config: Any) -> Executor:
    """The executor ``name`` for a build with settings ``config`` (``build.BuildConfig``): made by
    the class's ``from_config(config)`` where it has one (the settings it needs, e.g. Ray's
    address and replicas), else with no arguments. A newly registered executor needs no edit here."""
    cls = _executor_class(name)
    from_config = getattr(cls, "from_config", None)
    return from_config(config) if from_config is not None else cls()


def get_executor(name: str, **options: Any) -> Executor:
    """The executor called ``name``, made with ``options``; an unknown name says which was meant."""
    return _executor_class(name)(**options)


__all__ = ["DecidedChunk", "EXECUTORS", "EngineFactory", "Executor", "GenerationJob", "generate_through_cache",
           "executor_for", "get_executor"]
