"""Cleaning: what decides that a pool item is admitted, and the policy id that names those rules.

``clean`` takes pool items in pool order and yields ``Admitted`` or ``Dropped`` records, one per
item, in the same order. ``report`` (a dict the caller passes) receives the measured figures
(counts per action, shares) for the build report and the card.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, Union

from ..records import Admitted, Dropped, PoolItem

# Bumped whenever a cleaning rule changes what is admitted.
POLICY_ID = "orandcar-clean/0.1"


def clean(
    items: Iterable[PoolItem],
    report: Optional[dict] = None,
) -> Iterator[Union[Admitted, Dropped]]:
    report = report if report is not None else {}
    report.setdefault("policy", POLICY_ID)
    for order, item in enumerate(items):
        yield Admitted(item=item, order=order, policy=POLICY_ID, actions=())
