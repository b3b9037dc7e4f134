"""rebalancer: rebalances Kubernetes nodes on real CPU usage."""

__version__ = "0.1.0"
