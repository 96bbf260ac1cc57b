"""Locate: the geometry of every layer's hidden states and the layer score."""
