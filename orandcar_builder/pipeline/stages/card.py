"""card: the build's figures (``BuildFigures``) and the recipe that ran (its card options and repo)
-> README.md and examples/ in the dataset folder."""

from __future__ import annotations

from ...figures import BuildFigures
from ...heap import objects_before_frozen
from ...recipe import Recipe
from ..work import BuildContext, CardResult, StageStats, Timer


class CardStage:
    name = "card"

    def run(self, context: BuildContext, figures: BuildFigures, ran: Recipe) -> CardResult:
        from ...card import CardOptions, write_card

        with Timer() as timer, objects_before_frozen():
            card_options = CardOptions.from_mapping(ran.card_options(), source=ran.source)
            write_card(context.out, figures, **({"repo_id": ran.repo} if ran.repo else {}), options=card_options)
        return CardResult(StageStats(self.name, {"card": timer.seconds}))
