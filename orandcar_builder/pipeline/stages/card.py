"""card: the build's figures (``work.report``) and the recipe's card options -> README.md in the
dataset folder."""

from __future__ import annotations

from ..work import BuildWork, StageReport, Timer


class CardStage:
    name = "card"

    def run(self, work: BuildWork) -> StageReport:
        from ...card import CardOptions, write_card

        with Timer() as timer:
            ran = work.ran
            card_options = CardOptions.from_mapping(ran.card_options(), source=ran.source)
            write_card(work.out, work.report, **({"repo_id": ran.repo} if ran.repo else {}), options=card_options)
        return StageReport(self.name, {"card": timer.seconds})
