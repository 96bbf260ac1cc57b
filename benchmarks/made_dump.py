"""A per-layer benchmark's inputs where no Locate run is at hand: the embedded corpus packed into
the default sequences, and the held-out split's hidden states of every layer dumped into a
folder of your choosing, by the library's own functions (no Dagster, no artifact root). The
training split is not stored (ExtractConfig store_train=False): each layer's training pairs are
then computed from the training token ids, as a sweep partition computes them from such a dump.
The same fields as `located.located` (`from made_dump import made_dump`); a dump already
finalised in the folder is read again, not made again.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from located import Located


def made_dump(backbone: str, folder: Path) -> Located:
    """The inputs of `located` for `backbone`, the dump made under `folder` (about 10 s of
    forward passes and 0.3 GB for SmolLM2's 64 held-out sequences of 128 tokens)."""
    import numpy as np

    from dihal.backbones import load_backbone
    from dihal.config import BridgeProtocol, CorpusConfig, ExtractConfig, SequenceConfig
    from dihal.locate.corpus import make_sequences, separator_ids, shard_records
    from dihal.locate.extract import extract_hidden_states, state_spec, stored
    from storage.layout import ArtifactLayout
    from storage.states import StateReader, StateWriter

    folder = Path(folder)
    # the model cache of the artifact root, as `located` loads it
    layout = ArtifactLayout(Path(os.environ.get("DIHAL_ARTIFACTS", ".dihal/artifacts")))
    bb = load_backbone(backbone, cache_dir=layout.model_cache())
    final = folder / "dump"
    ids_file = folder / "val_ids.npy"
    extract = replace(ExtractConfig(), store_train=False)
    if not ids_file.exists():  # packing the corpus: the slow part under load, kept
        corpus = CorpusConfig()
        bos_id, eos_id = separator_ids(bb.tokenizer, bb.weights.path)
        packed = make_sequences(shard_records(corpus), corpus, bb.tokenizer, SequenceConfig(),
                                bos_id=bos_id, eos_id=eos_id, revision=bb.weights.revision)
        folder.mkdir(parents=True, exist_ok=True)
        for split in ("train", "val"):  # as storage's Sequences reads them; val last
            np.save(folder / f"{split}_ids.npy", np.array(packed.input_ids[split], dtype=np.int64))
    seqs = {s: np.load(folder / f"{s}_ids.npy") for s in ("train", "val")}
    if not final.exists():
        ids = stored(seqs, extract)
        writer = StateWriter(folder / "work", state_spec(bb, bb.weights.revision, ids, extract),
                             "benchmark", tokens=ids, attrs=bb.info().to_dict())
        extract_hidden_states(bb, ids, writer, extract)
        writer.finalize(final)
    return Located(reader=StateReader(final), train_ids=seqs["train"], extract=extract,
                   backbone=bb, protocol=BridgeProtocol())
