"""Checks on the science, shown in the UI's Checks tab: each reads an artifact through storage
and calls one dihal.run.checks function. They do not block downstream assets: they say what is
doubtful about a result, the result stays."""

from collections.abc import Callable

import dagster as dg

from dihal.errors import DihalError
from dihal.run.stages import asset_key
from storage import (
    Bridge,
    Bridgeability,
    Comparison,
    Evaluation,
    HiddenStates,
    Report,
    swept_bridges,
)


def _result(run: Callable[[], tuple[bool, dict]]) -> dg.AssetCheckResult:
    try:
        passed, found = run()
    except DihalError as exc:  # the artifact is missing or damaged: nothing to vouch for
        return dg.AssetCheckResult(passed=False, metadata={"error": str(exc)},
                                   description=f"failed: {exc}")
    # a failing check says why in its description (the event log; the driver prints it)
    why = None if passed else "failed: " + ", ".join(f"{k} {v}" for k, v in found.items())
    return dg.AssetCheckResult(passed=bool(passed), description=why, metadata={
        k: (dg.MetadataValue.json(v) if isinstance(v, dict | list) else v) for k, v in found.items()})


def science_checks(backbone: str, n_layers: int) -> list:
    def check(asset: str, name: str, description: str):
        return dg.asset_check(asset=dg.AssetKey(asset_key(asset, backbone)), name=name,
                              blocking=False, required_resource_keys={"storage"},
                              description=description)

    def layout(context):
        return context.resources.storage.layout()

    @check("bridge_sweep", "losses_fell", "Every swept bridge ends below its validation loss "
                                          "at initialisation.")
    def sweep_losses_fell(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        from dihal.run.checks import loss_fell

        def run():
            hs = HiddenStates(layout(context), backbone).manifest()
            swept = swept_bridges(layout(context), backbone, n_layers, hs) if hs else []
            found = {str(a.key): loss_fell(a.metrics()) for a, _ in swept}
            bad = [k for k, (ok, _) in found.items() if not ok]
            return bool(found) and not bad, {"layers": len(found), "not_learned": ", ".join(bad) or "none"}

        return _result(run)

    @check("bridge", "loss_fell", "The bridge at l* ends below its validation loss at initialisation.")
    def bridge_loss_fell(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        from dihal.run.checks import loss_fell

        return _result(lambda: loss_fell(Bridge(layout(context), backbone).metrics()))

    @check("bridgeability", "enough_layers", "The Spearman figures rest on at least 5 swept layers.")
    def enough(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        from dihal.run.checks import enough_layers

        return _result(lambda: enough_layers(
            Bridgeability(layout(context), backbone).require().info["swept_layers"]))

    @check("comparison", "budgets_matched", "Every row ran at DiHAL's budget (size +-10 %, "
                                            "tokens, sampler steps, sequence length).")
    def budgets(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        from dihal.run.checks import budgets_matched

        return _result(lambda: budgets_matched(
            Comparison(layout(context), backbone).require().info["rows"]))

    @check("eval", "samples_readable", "Every model's samples are there, parse, and are not all empty.")
    def samples(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        from dihal.run.checks import samples_readable

        def run():
            art = Evaluation(layout(context), backbone)
            n = art.require().config["n_samples"]
            return samples_readable(art.sample_lines(), n)

        return _result(run)

    @check("report", "names_its_inputs", "The report names the fingerprint of every input artifact.")
    def names_inputs(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
        from dihal.run.checks import names_fingerprints

        def run():
            art = Report(layout(context), backbone)
            return names_fingerprints(art.markdown(), art.require().upstream)

        return _result(run)

    return [sweep_losses_fell, bridge_loss_fell, enough, budgets, samples, names_inputs]
