"""A text dataset of the Hugging Face Hub as the corpus (an id, or a folder in the Hub's layout),
streamed through `datasets` with the same document counting, minimum length and malformed-row
handling as a Dolma shard, and a fingerprint by identity (id, revision, config, split and a
digest of the documents read)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from dihal.config import CorpusConfig
from dihal.errors import CorpusError, MalformedLineError
from dihal.locate.documents import CorpusStats, Document, is_empty
from dihal.results import HubShard, Shard

HUB_FIELDS = ("hf_dataset", "hf_config", "hf_split", "hf_text_field", "hf_id_field",
              "hf_revision")


class HubSource:
    """A Hugging Face text dataset, by id (the Hub, or its local cache offline) or a folder in
    the Hub's layout (parquet or JSON-lines files, e.g. data/train-00000-of-00001.parquet),
    with a config, a split and the field holding the text, streamed through `datasets`
    (streaming=True: rows are read as they come, nothing is downloaded whole). Documents are
    the rows: the id from `hf_id_field`, else "<split>:<row index>"; counted, skipped below
    min_chars and malformed (no text field, text not a string) as a Dolma shard's lines are;
    at most max_docs of them."""

    def __init__(self, cfg: CorpusConfig) -> None:
        if not cfg.hf_dataset:
            raise ValueError("HubSource needs a CorpusConfig with hf_dataset")
        self.cfg = cfg

    @property
    def label(self) -> str:
        c = self.cfg
        return (f"Hugging Face dataset {c.hf_dataset!r} (config {c.hf_config or 'default'}, "
                f"split {c.hf_split}, revision {c.hf_revision or 'default'})")

    def _rows(self) -> Iterator[tuple[int, dict]]:
        c = self.cfg
        try:
            from datasets import load_dataset
        except ImportError as exc:
            raise CorpusError("reading a Hugging Face dataset needs the `datasets` package: "
                              "pip install -e . (pyproject pins it)") from exc
        try:
            ds = load_dataset(c.hf_dataset, c.hf_config, split=c.hf_split,
                              revision=c.hf_revision, streaming=True)
        except Exception as exc:  # DatasetNotFoundError, a bad split or config, no network...
            raise CorpusError(
                f"the {self.label} cannot be opened ({type(exc).__name__}: {exc}). Check the id "
                "or folder, hf_config and hf_split; offline, the dataset must be in the local "
                "Hugging Face cache or a folder of parquet/JSON files.") from exc
        self.check_fields(getattr(ds, "features", None))
        rows = iter(ds)
        index = 0
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            except Exception as exc:  # a damaged file; `datasets`' JSON reader fails a block
                raise CorpusError(
                    f"the {self.label} cannot be read past row {index} ({type(exc).__name__}: "
                    f"{exc}). Fix or drop the damaged file; a JSON-lines file with bad lines "
                    "can be read as Dolma-format shards (corpus paths), which count and skip "
                    "malformed lines.") from exc
            yield index, row
            index += 1

    def check_fields(self, features) -> None:
        """Refuse, before a row is streamed, a text or id field the dataset's features do not
        have (or a text field that is not a string), naming its fields. Features unknown
        until rows are read (None) leave the per-row check."""
        if not features:
            return
        c, fields = self.cfg, sorted(features)
        for key, name in (("hf_text_field", c.hf_text_field), ("hf_id_field", c.hf_id_field)):
            if name and name not in features:
                raise CorpusError(
                    f"the {self.label} has no field {name!r} ({key}); its fields are "
                    f"{', '.join(fields)}. Set {key} to one of them (nothing was streamed).")
        dtype = getattr(features[c.hf_text_field], "dtype", None)
        if dtype not in ("string", "large_string"):
            raise CorpusError(
                f"the {self.label}'s text field {c.hf_text_field!r} holds {dtype or 'no string'}"
                f" ({features[c.hf_text_field]}), not text; its fields are {', '.join(fields)}. "
                "Set hf_text_field to a string field (nothing was streamed).")

    def documents(self, stats: CorpusStats | None = None) -> Iterator[Document]:
        """Stream the documents, counting them into `stats` as iter_documents does."""
        c = self.cfg
        stats = stats if stats is not None else CorpusStats()
        if stats.documents >= c.max_docs:
            return
        for index, row in self._rows():
            text = row.get(c.hf_text_field)
            doc_id = row.get(c.hf_id_field) if c.hf_id_field else f"{c.hf_split}:{index}"
            if c.hf_text_field not in row:
                problem = f"KeyError: no field {c.hf_text_field!r} (fields: {sorted(row)})"
            elif not isinstance(text, str):
                problem = f"TypeError: {c.hf_text_field} is {type(text).__name__}, not a string"
            elif doc_id is None:
                problem = f"KeyError: no id in field {c.hf_id_field!r}"
            else:
                problem = None
            if problem:
                where = f"{c.hf_dataset}[{c.hf_split}][{index}]"
                if c.on_malformed == "error":
                    raise MalformedLineError(
                        f"malformed row {where}: {problem}. Fix the row, set hf_text_field / "
                        "hf_id_field to the dataset's fields, or set on_malformed='skip'.")
                stats.malformed += 1
                stats.malformed_examples.append(f"{where}: {problem}")
                continue
            if is_empty(text, c.min_chars):
                stats.skipped_empty += 1
                continue
            source = str(row.get("source") or c.hf_config or Path(c.hf_dataset).name)
            stats.documents += 1
            stats.by_source[source] += 1
            stats.chars += len(text)
            yield Document(str(doc_id), text, source)
            if stats.documents >= c.max_docs:
                return

    def record(self) -> HubShard:
        """What the corpus stage records: the dataset's identity and the documents read (their
        count and the sha256 of their ids and texts, in order), read in one streaming pass."""
        c = self.cfg
        digest, stats = hashlib.sha256(), CorpusStats()
        for doc in self.documents(stats):
            for part in (doc.id, doc.text):
                raw = part.encode("utf-8")
                digest.update(len(raw).to_bytes(8, "big") + raw)
        local = Path(c.hf_dataset).expanduser().is_dir()
        return HubShard(str(Path(c.hf_dataset).expanduser().resolve()) if local
                        else c.hf_dataset, local, c.hf_revision, c.hf_config, c.hf_split,
                        c.hf_text_field, c.hf_id_field, stats.documents, digest.hexdigest())

    def verified_documents(self, recorded: list[Shard]) -> Iterator[Document]:
        """The documents, once a first pass has checked that they are the ones the corpus stage
        recorded (a changed dataset is refused, not read under the old fingerprint)."""
        fix = "re-materialise the corpus asset (`dagster asset materialize --select corpus`)"
        if len(recorded) != 1 or not isinstance(recorded[0], HubShard):
            raise CorpusError(f"the corpus asset recorded shards, not the {self.label}: {fix}.")
        now, rec = self.record(), recorded[0]
        if now.identity() != rec.identity():
            raise CorpusError(
                f"the {self.label} now reads {now.documents} documents (sha256 "
                f"{now.sha256[:12]}) where the corpus asset recorded {rec.documents} "
                f"(sha256 {rec.sha256[:12]}): {fix}, then this asset.")
        return self.documents()
