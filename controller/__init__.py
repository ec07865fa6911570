"""Tidelog controller: the metadata quorum."""
