"""The settings models of every policy section (pydantic: frozen, unknown fields rejected)."""
