"""Manifests of other platforms turned into values overlays of this chart (`tfmw import ...`)."""
