"""Adapters: the only code that talks to Kubernetes (``kube``) and Prometheus (``prom``)."""
