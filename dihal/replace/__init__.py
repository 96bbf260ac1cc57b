"""Replace: the bridge sweep, its bridgeability, the hybrid and its controls."""
