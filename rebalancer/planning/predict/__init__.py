"""The 8-day weighted-P95 node load predictor (pure: no I/O clients, no clock).

``history`` daily peaks per pod (missing days NaN, never zero), ``aggregate`` the aggregations, ``predictor``
pods -> node predictions with churn fallbacks, ``days`` the calendar days whose peaks it reads. The policy
section is ``rebalancer.domain.settings.predictor``; the back-test, its tables and plots are in
``rebalancer.offline.predict``.
"""

from rebalancer.domain.settings.predictor import AGGREGATIONS, Aggregation, PredictorSettings
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.predictor import (
    NodePrediction,
    PodPrediction,
    Prediction,
    Source,
    predict,
    repredict,
    stale_nodes,
)

__all__ = [
    "AGGREGATIONS",
    "Aggregation",
    "DailyPeaks",
    "NodePrediction",
    "PodPrediction",
    "Prediction",
    "PredictorSettings",
    "Source",
    "predict",
    "repredict",
    "stale_nodes",
]
