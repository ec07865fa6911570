"""Fault injection, workloads and checkers."""
