"""`rebalancer simulate`: a closed-loop simulation comparing rebalancing policies on the production code."""
