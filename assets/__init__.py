"""Thin Dagster assets: read config, resolve paths through storage, call one dihal function,
write, return MaterializeResult. Heavy imports happen inside the asset functions."""
