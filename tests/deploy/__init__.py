"""Tests of the deployment artefacts: rendered configs, container images, manifests."""
