"""The soft landing guard: a taint of the project's own key on hot and just-relieved nodes, so
that the scheduler places replacements of evicted pods elsewhere. ``decide`` holds the pure rules,
``marks`` the wire form of a mark, ``settings`` the policy section; the adapter is ``rebalancer.adapters.kube.node_guard``."""
