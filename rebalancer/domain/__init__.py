"""Domain: frozen types, errors, quantities, labels, output formats and the policy's settings models (pure, no I/O)."""
