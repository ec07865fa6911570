"""Tidelog: a distributed, replicated event log (shared library, client and CLI)."""
