"""The driver's pre-flight: gather the facts dihal.run.preflight checks, for the chosen preset,
backbone and workers, before any run is launched (each heavy stage checks its own part again
when it runs, whichever door launched it: dihal.run.preflight.stage_refusals). The corpus is
tokenised only as far as the requested splits need; the backbone is loaded once, as the steps
load it, for the largest hidden state of a first batch."""

from __future__ import annotations

import importlib


def _resources(module: str) -> dict:
    """The code location's resources (the tiny test location names its own model)."""
    from resources import BackboneResource, ComputeResource, StorageResource

    defaults = {"storage": StorageResource(), "backbones": BackboneResource(),
                "compute": ComputeResource()}
    defs = getattr(importlib.import_module(module), "defs", None)
    found = dict(getattr(defs, "resources", None) or {})
    return {k: found.get(k, v) for k, v in defaults.items()}


def stage_configs(profile: dict, backbone: str):
    """(CorpusConfig, SequenceConfig, ExtractConfig, BridgeProtocol) of the profile."""
    from dihal.config import BridgeProtocol, CorpusConfig, ExtractConfig, SequenceConfig
    from dihal.registry import get_spec

    def of(stage: str) -> dict:
        return {k: tuple(v) if isinstance(v, list) else v
                for k, v in profile.get(stage, {}).items()}

    extract = {"dtype": get_spec(backbone).state_dtype, **of("hidden_states")}
    return (CorpusConfig(**of("corpus")), SequenceConfig(**of("sequences")),
            ExtractConfig(**extract), BridgeProtocol(**of("bridge_sweep")))


def gather(args, layers: list[int], resources: dict | None = None):
    """The facts of this run (dihal.run.preflight.Facts) and its stage configs; the resources are
    those of the code location args.module unless given."""
    import torch

    from dihal.errors import CorpusError
    from dihal.locate.corpus import (
        corpus_documents,
        document_lengths,
        pack_sequences,
        separator_ids,
    )
    from dihal.run.preflight import (
        PreflightError,
        model_facts,
        read_max_positions,
        require_positions,
    )
    from dihal.run.profiles import resolve_preset

    profile = resolve_preset(args.profile).stages
    corpus, seq, extract, protocol = stage_configs(profile, args.backbone)
    res = resources or _resources(args.module)
    layout = res["storage"].layout()
    # the sequences' length against the backbone's positions, from its config.json: before the
    # corpus is tokenised or the model loaded
    weights = res["backbones"].resolve(args.backbone, layout)
    require_positions(args.backbone, read_max_positions(weights.path), seq)
    tok = res["backbones"].load_tokenizer(args.backbone, layout)
    bos_id, eos_id = separator_ids(tok, weights.path)  # a tokenizer without EOS: refused
    try:  # the corpus the corpus stage reads: a Hub dataset's rows where hf_dataset is set
        lengths = document_lengths(corpus_documents(corpus), tok, seq)
    except CorpusError as exc:
        raise PreflightError(f"pre-flight refused {args.backbone} (1 problem(s)):\n  - corpus: "
                             f"{exc}") from None
    device = res["compute"].resolved_device()
    bb = res["backbones"].load(args.backbone, layout, res["compute"], device)
    first = type(seq)(**{**seq.__dict__, "n_train": min(seq.n_train, extract.batch_size),
                         "n_val": 1})
    max_abs = None
    try:
        packed = pack_sequences(corpus_documents(corpus), tok, first,
                                bos_id=bos_id, eos_id=eos_id)
    except Exception:  # too small a corpus: the corpus check says so with its numbers
        packed = None
    if packed is not None:
        ids = torch.tensor(packed["train"].input_ids, dtype=torch.long)
        max_abs = float(bb.hidden_states(ids).abs().float().amax())
    facts = model_facts(bb, device, workers=args.workers, swept_layers=len(layers),
                        root=layout.root, doc_lengths=lengths, first_batch_max_abs=max_abs)
    del bb
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return facts, seq, extract, protocol


def preflight(args, layers: list[int], say) -> None:
    """Raise dihal.run.preflight.PreflightError where the run would not fit (a pinned package
    outside its supported releases first, before torch is imported); else say so."""
    from dihal.run.preflight import PreflightError
    from dihal.versions import UnsupportedVersionError, check_dependencies

    try:
        for msg in check_dependencies():
            say(f"warning: {msg}")
    except UnsupportedVersionError as exc:
        raise PreflightError(f"pre-flight refused {args.backbone} (1 problem(s)):\n"
                             f"  - versions: {exc}") from None

    import torch

    from dihal.run.preflight import require

    if torch.cuda.is_available():  # in a child process: its CUDA context ends with it, and
        import multiprocessing  # the GPUs are left whole to the steps
        from concurrent.futures import ProcessPoolExecutor

        # The child is told to end when its work is done, not sent SIGTERM (a Pool's exit):
        # started where SIGINT is ignored (a background job of a non-interactive shell), a
        # process ignores SIGTERM too once Dagster has mapped SIGTERM to SIGINT's handler, its
        # spawned children inherit that, and a Pool's exit would wait on the child for ever
        spawn = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
            facts, seq, extract, protocol = pool.submit(gather, args, layers).result()
    else:
        facts, seq, extract, protocol = gather(args, layers)
    require(facts, seq, extract, protocol)
    say(f"pre-flight: {args.backbone} at profile {args.profile} with {args.workers} worker(s) "
        f"fits (corpus, host memory, disk" + (", GPU memory" if facts.gpu_total else "")
        + (f", {extract.dtype} headroom {65504.0 / facts.first_batch_max_abs:.1f}x"
           if facts.first_batch_max_abs and extract.dtype == "float16" else "") + ")")


def folders(module: str) -> list:
    """The folders a run writes to (dihal.run.preflight.Folder), checked before anything is loaded
    or written: DAGSTER_HOME (where set) and the artifact root of the code location `module`."""
    import os

    from dihal.run.preflight import folder_facts

    home = os.environ.get("DAGSTER_HOME")
    root = _resources(module)["storage"].root
    return ([folder_facts(home, "DAGSTER_HOME", "Dagster's record of every run (its SQLite "
                          "storage, event and compute logs)")] if home else []) + [
        folder_facts(root, "DIHAL_ARTIFACTS", "the artifacts (hidden states, tables, bridges, "
                     "checkpoints) and their locks")]
