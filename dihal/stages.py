"""The one table of the pipeline's stages. Each stage is named once, here, with its code
version, the config dataclass its run config mirrors, and the storage class of its artifact;
from it are derived the code versions of the fingerprints and the Dagster code_version
(assets._stage.CODE_VERSIONS), the stages a profile may override (dihal.profiles.STAGE_CONFIGS),
the Dagster run-config classes (assets.configs), each artifact kind's manifest `stage`
(storage.artifacts) and the asset keys (`asset_key`). A new stage is one entry.

Standard library only: storage imports it (the config classes are named, not imported).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Stage:
    """One stage. `name` is the manifest's stage, the profile's key and the asset key's prefix
    (`<name>_<backbone>`, or `<name>` for the shared corpus)."""

    name: str
    # bumped when the stage's code changes its output; part of every fingerprint and of the
    # Dagster code_version, so the UI marks downstream assets stale. `history`: what each did.
    code_version: str
    kind: str  # the storage.artifacts class of its artifact
    config: str | None = None  # the dihal.config dataclass its run config mirrors
    run_config: str | None = None  # the Dagster run-config class's name
    run_defaults: dict[str, Any] = field(default_factory=dict)  # its defaults other than config's
    run_doc: str | None = None  # the run config's docstring, where not the dataclass's
    history: str = ""


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("corpus", "1", "Corpus", "CorpusConfig", "CorpusRunConfig"),
    Stage("sequences", "1", "Sequences", "SequenceConfig", "SequencesRunConfig"),
    Stage("hidden_states", "2", "HiddenStates", "ExtractConfig", "ExtractRunConfig",
          history="2: the held-out split keeps the backbone's next-token reference"),
    Stage("geometry", "3", "Geometry", "GeometryConfig", "GeometryRunConfig",
          history="2: the robust normalisation and the rival predictors; 3: token bootstrap"),
    Stage("layer_score", "3", "LayerScore", "LayerScoreConfig", "LayerScoreRunConfig",
          history="2: l*'s stability over the token bootstrap; 3: over resamples of whole "
          "sequences and split halves"),
    Stage("bridge_sweep", "3", "SweepBridge", "BridgeProtocol", "BridgeProtocolRunConfig",
          history="2: validation loss at initialisation recorded; 3: the loss at t = 1; "
          "replicate training seeds (protocol seeds)"),
    Stage("bridgeability", "4", "Bridgeability",
          history="2: rival predictors, intervals, standing against depth; 3: standing by the "
          "paired difference (Holm over predictors x targets), partial Spearman given depth, "
          "oracle and worst by hybrid NLL beside those by validation loss; training seeds "
          "resampled on two levels; 4: the replicates' count and time beside the seed spread "
          "(seed_layers: replicates on some swept layers only)"),
    Stage("bridge", "4", "Bridge", "BridgeProtocol", "FullBridgeRunConfig", {"epochs": 2.0},
          "The bridge at l* with the full budget: the sweep protocol with more passes.",
          history="2: train_tokens = sequences consumed x length; 3: init validation loss; "
          "4: the loss at t = 1; protocol seeds"),
    Stage("eval", "12", "Evaluation", "EvalConfig", "EvalRunConfig",
          history="2: rows carry their role, the judge's name; 3: mean-of-samples Gen.PPL, "
          "intervals; 4: the backbone sampled with the step's threads (MAUVE no longer drops "
          "them to 1); 5: rows record the CPU kernels (torch's CPU capability) beside the threads; "
          "6 (two branches, merged as 7): Gen.PPL on the first L judge tokens, spaCy diversity, "
          "judge lengths, MAUVE over k-means seeds on equal counts, the start token and "
          "temperature, per-sample log-PPL; DiHAL at the K chosen on validation and the control "
          "hybrids (regression, layer-drop, ridge), each with its paired difference from DiHAL; "
          "cost per token; 8: the regression row is the regression control at l* trained with the "
          "bridge stage's full budget (FullRegressionControl, made or reused by eval), labelled "
          "with its budget and its train_tokens; 9: the temperature frontier (DiHAL and the "
          "backbone at each frontier_temperatures), kept out of the rows; 10: the control rows' "
          "budget columns; 11: the cost table prices the backbone's and DiHAL's rows by the FLOP "
          "model (each row's flops_from), counting only the controls' decodes, and times 2 x 8 tokens "
          "(flop_length 16 as before); 12: every row's empty samples (failures) with the Wilson "
          "interval of their rate, MAUVE over every sample; the cost table times 4 x 32 tokens "
          "with each round's spread and checks DiHAL's order in K"),
    Stage("regression_sweep", "3", "RegressionControl", history="2: the loss at t = 1; 3: the "
          "closed-form ridge map per layer (the stronger control, seconds instead of a "
          "network's training)"),
    Stage("sampler_steps", "6", "SamplerCurve", "SamplerCurveConfig", "SamplerCurveRunConfig",
          history="2: measured with the step's threads (as eval 4); 3: the trained K's row is "
          "the bridge's own measurement; 4: rows carry their sampler rule (`rules` setting); "
          "5: both rules by default (eval samples at the (rule, K) they choose); 6: the other "
          "rules' K = 1 rows are the default rule's (same_as_rule), not measured again"),
    Stage("baseline", "6", "BaselineRun", "BaselineRunConfig", "BaselineRunConfig",
          history="2: trained by the bridge's loop (one trainer); 3: as eval 3; 4: decoded at "
          "the common temperature (CoDAR's 0.7 as an extra row), as eval 6; 5: the temperature "
          "frontier's points (row[\"frontier\"]), the sampling time; 6: as eval 12 (empty samples)"),
    Stage("comparison", "7", "Comparison",
          history="2: rows carry their role; 3: as eval 3; 4/5: as eval 6/7, baselines' native-"
          "temperature rows, the control hybrids' rows and DiHAL's at the chosen K, with paired "
          "differences; 6: the temperature frontier of the eval and the baselines; 7: rows carry "
          "the empty samples"),
    Stage("full_training", "7", "FullTraining",
          history="2: as eval 3; 3: as eval 4; 4: the oracle and worst layer by hybrid NLL; "
          "5: as eval 7; 6: each bridge also sampled at the (rule, K) chosen on validation at l* "
          "(sampler_steps upstream; rows labelled by sampler), the bridge stage's training seeds "
          "with their spread, training seconds; l*'s rows taken from the eval where it drew "
          "that bridge with the same config (eval upstream then); 7: as eval 12 (empty samples)"),
    Stage("report", "15", "Report",
          history="3: built from typed inputs; 4: rival predictors and intervals; 5: across "
          "backbones; 6: a lone backbone's report suggests another one, not itself; the CPU "
          "kernels the samples were drawn with; 7: opens on its answers, each linking to its "
          "section; one proxy table per normalisation; 8/9: verdicts by the paired test, the "
          "oracle by both measures; generation at one temperature with lengths, the log Gen.PPL "
          "difference and a power count per pair; l* over resampled sequences and halves; DiHAL "
          "against its control hybrids; cost per generated token, hybrid NLL against FLOPs, the "
          "break-even; 10: which layers had how many training seeds, and what more would cost; "
          "11: Gen.PPL against diversity across temperatures (the frontier); 12: full training "
          "at both samplers, with the eval's control hybrids (from eval) and the seed spread, or "
          "what a second seed would cost; 13: the frontier among the opening answers; 15: every "
          "generation table's empty samples, verdicts that weigh them; one timing per model "
          "(the cost table's)"),
)}

CODE_VERSIONS = {name: s.code_version for name, s in STAGES.items()}


def stage_of_kind(kind: str) -> str | None:
    """The stage whose artifact is the storage class named `kind`, None if none is."""
    return next((name for name, s in STAGES.items() if s.kind == kind), None)


def asset_key(stage: str, backbone: str | None = None) -> str:
    """The Dagster asset (without partition) that makes `stage` for `backbone`."""
    if stage not in STAGES:
        raise KeyError(f"unknown stage {stage!r}; the stages are {sorted(STAGES)} (dihal.stages)")
    return f"{stage}_{backbone}" if backbone else stage
