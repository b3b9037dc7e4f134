"""Where the replacements of a node's whole group land when the group is evicted at once (pure).

HighNodeUtilization evicts all of a node's movable pods together, and their replacements are created at
about the same time while the node is still schedulable (rebalancer does not cordon it): with its pods
gone it is the least requested node of its pool, and the one holding none of their workloads' pods, so
the default scheduler's least-allocated scoring and spreading send replacements right back to it.

:class:`GroupLanding` places the replacements one after another, as the scheduler binds them: each is
predicted (:class:`strategies.landing.LandingPredictor`) with the whole group gone from the node and the
earlier replacements bound where they most probably land, so that each landing changes the next one's
scores. A replacement's landing risk is the probability that it lands back on the node, off the
destinations, or on a destination without the real-usage room; the group's risk is the probability that
any of them does, ``1 - prod(1 - risk)`` along the most probable path (the earlier replacements where they
most probably land). With memory or pods thresholds, a landing on a destination the replacement would put
over one of their targets counts as risk too (:func:`strategies.every_target.landing_under_every_target`).
The group may leave only when that risk is at most ``maxLandingRisk``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rebalancer.domain.model import Pod
from strategies.candidates import Candidate
from strategies.every_target import landing_under_every_target
from strategies.landing import TOLERANCE, Landing, LandingPredictor, LandingVerdict, percent
from strategies.resources import ExtraRoom


class GroupLanding:
    """One node's group on its way out, in the predictor's model from construction until ``abandon``
    (every pod vacated; each replacement bound where ``land`` predicted it)."""

    def __init__(
        self,
        predictor: LandingPredictor,
        node: str,
        pods: Sequence[Pod],
        max_risk: float,
        extra: ExtraRoom | None = None,
    ) -> None:
        self._predictor = predictor
        self._extra = extra  # memory and pods room under their targets, when the thresholds name them
        self._node = node
        self._max_risk = max_risk
        self._checkpoint = predictor.checkpoint()
        self._stays = 1.0  # the probability that every replacement so far lands on a good destination
        predictor.vacate(pods)

    @property
    def risk(self) -> float:
        """The probability that some replacement placed so far lands back or off the destinations."""
        return 1.0 - self._stays

    def land(self, candidate: Candidate) -> Landing:
        """Where ``candidate``'s replacement most probably lands (bound there for the next ones), or why the
        group must stay (``node`` None): this replacement's risk, or the group's, above the cap."""
        pod, usage_m = candidate.pod, candidate.usage_m
        landing = self._predictor.land(pod, self._node, usage_m)
        if landing.node is not None and self._extra is not None:
            landing = landing_under_every_target(self._predictor, self._extra, candidate, self._node, landing)
        if landing.node is None:
            return landing
        stays = self._stays * (1.0 - landing.risk)
        if 1.0 - stays > self._max_risk + TOLERANCE:
            text = (
                f"the group's predicted landing risk {percent(1.0 - stays)} > maxLandingRisk "
                f"{percent(self._max_risk)}, this replacement {landing.reason}"
            )
            return Landing(None, text, LandingVerdict.ELSEWHERE, 1.0 - stays)
        self._stays = stays
        self._predictor.commit(pod, landing.node, usage_m)
        return landing

    def abandon(self) -> None:
        """The group stays: the model is as it was before it."""
        self._predictor.rollback(self._checkpoint)
