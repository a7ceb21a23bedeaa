"""pytest plugin for gates (being built)."""
