"""Report: the report, one module per section beside its answer."""
