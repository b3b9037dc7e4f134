"""The soft landing guard: a taint of the project's own key on hot and just-relieved nodes, so
that the scheduler places replacements of evicted pods elsewhere. ``decide`` holds the pure rules,
``inputs`` what they read, ``applier`` the writes; the wire form of a mark is ``rebalancer.domain.guard_marks``,
the policy section ``rebalancer.domain.settings.guard``, the adapter ``rebalancer.adapters.kube.node_guard``."""
