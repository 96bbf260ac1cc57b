"""The run's operations, beside the method: the stages and their code versions, the presets,
the pre-flight and the one capacity model of a run, the cost estimates of the budget study,
the devices a step leases, determinism, and the science checks the Dagster layer shows. The
method's modules (dihal/ outside this package and the report) never import it."""
