"""The labels that name a generation row's role, and full training's roles and samplers: written by
the stages that make the rows (dihal.evaluate.generation, dihal.compare.stage), read by the report,
the checks and the driver. Standard library only, so the report and the Dagster layer can import
them without loading torch."""

# a generation row's `role`
DIHAL = "dihal"  # the hybrid at l*, at the protocol's K
BACKBONE = "backbone"  # the autoregressive reference
BASELINE = "baseline"  # a continuous-diffusion baseline at DiHAL's budget and temperature
NATIVE_ROLE = "baseline (native temperature)"  # a baseline's extra row at its own temperature
CONTROL = "control"  # the control hybrids (regression, layer-drop, ridge)
CHOSEN_K = "dihal (chosen K)"  # DiHAL at the (rule, K) chosen on validation

# full training: the roles of its bridges, and a row's `sampler`
FULL_TRAINING_ROLES = ("geometry l*", "oracle", "worst")
PROTOCOL_K, CHOSEN_ON_VALIDATION = "protocol", "chosen on validation"
