"""validate: the dataset folder -> its problems (``work.problems``; none: the build may be swapped
in)."""

from __future__ import annotations

from ...dataset.validate import validate_folder
from ..work import BuildWork, StageReport, Timer


class ValidateStage:
    name = "validate"

    def run(self, work: BuildWork) -> StageReport:
        with Timer() as timer:
            work.problems = validate_folder(work.out)
        return StageReport(self.name, {"validate": timer.seconds}, {"problems": len(work.problems)})
