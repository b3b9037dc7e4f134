"""Import a community descheduler policy (``DeschedulerPolicy`` or its chart's values) as a rebalancer policy.

Pure except :mod:`rebalancer.app.descheduler.command`: :func:`convert` takes parsed YAML and returns the policy
data and the notes on what has no equivalent or means something else.
"""

from __future__ import annotations

from rebalancer.app.descheduler.convert import Conversion, convert
from rebalancer.app.descheduler.notes import Note
from rebalancer.app.descheduler.source import SourceProblem

__all__ = ["Conversion", "Note", "SourceProblem", "convert"]
