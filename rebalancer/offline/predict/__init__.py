"""`rebalancer predict` and its back-test: usage traces in, predictions, tables and plots out."""
