"""Evaluate: generation, its metrics, the judge, the frontier and the cost."""
