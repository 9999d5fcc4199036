"""Subcommands of `spark-gateway`, one module each (see gateway/cli.py)."""
