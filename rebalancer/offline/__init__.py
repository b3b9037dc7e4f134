"""Offline tools, not run in the cluster: simulation, back-tests, plots, traces, the embedded demo."""
