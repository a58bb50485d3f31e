"""CLI command modules; each defines ``register(group)``."""
