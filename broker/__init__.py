"""Tidelog broker: storage, replication, serving."""
