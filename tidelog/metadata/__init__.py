"""Cluster metadata as records and images, shared by controllers and brokers.

Controllers commit the records; brokers follow them. Records are replayed into deltas that build
immutable images (as in Kafka's org.apache.kafka.image).
"""
