"""Actions: the only code that writes to the cluster (evictor, steerer, landing guard applier)."""
