"""Compare: the baselines at a matched budget and the comparison stage."""
