"""Agent integrations, each an optional extra (see docs/integrations.md)."""
