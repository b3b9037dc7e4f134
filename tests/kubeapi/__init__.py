"""A faithful test Kubernetes API server (a test double: it stays out of the package)."""

from tests.kubeapi.server import Fault, Request, Response, TestApiServer

__all__ = ["Fault", "Request", "Response", "TestApiServer"]
