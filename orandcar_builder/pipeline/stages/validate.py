"""validate: the dataset folder -> its problems (none: the build may be swapped in)."""

from __future__ import annotations

from ...dataset.validate import validate_folder
from ...heap import objects_before_frozen
from ..work import BuildContext, StageStats, Timer, ValidateResult


class ValidateStage:
    name = "validate"

    def run(self, context: BuildContext) -> ValidateResult:
        with Timer() as timer, objects_before_frozen():
            problems = validate_folder(context.out)
        return ValidateResult(problems, StageStats(self.name, {"validate": timer.seconds}, {"problems": len(problems)}))
