"""DiHAL: geometry-guided hidden-state replacement. The method, importable without Dagster."""

__version__ = "0.1.0"
