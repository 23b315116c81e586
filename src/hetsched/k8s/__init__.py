"""Kubernetes integration: a device plugin, a scheduler and a scheduler extender."""
