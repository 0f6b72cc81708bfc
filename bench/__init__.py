"""Benchmarks. They print figures; nothing here asserts a time (the machine is shared)."""
