"""Efficiency metrics (pure): did the evictions help?

Records of hot nodes found, evictions and their follow-up (the document is
``rebalancer.domain.efficiency_records``), what each cycle adds to them (``ledger``), where the replacements
landed (``landings``), the bounce-back memory (``moves``) and the discovery / eviction / effective rates
(``rates``). The adapters store the records in a ConfigMap and read the reference from Prometheus.
"""

from rebalancer.domain.efficiency_records import EfficiencyState, RecordsCorrupt
from rebalancer.domain.settings.efficiency import EfficiencySettings, ReferenceSettings
from rebalancer.records.ledger import judge_followups, observe_cycle, outcome_reason
from rebalancer.records.moves import recently_moved
from rebalancer.records.rates import CLUSTER, EfficiencyReport, PoolRates, compute_rates

__all__ = [
    "CLUSTER",
    "EfficiencyReport",
    "EfficiencySettings",
    "EfficiencyState",
    "PoolRates",
    "RecordsCorrupt",
    "ReferenceSettings",
    "compute_rates",
    "judge_followups",
    "observe_cycle",
    "outcome_reason",
    "recently_moved",
]
