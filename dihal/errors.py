"""Errors that name the thing that is wrong and how to fix it."""


class DihalError(RuntimeError):
    """Base class: every message says what is wrong and what to do about it."""


class UnknownBackboneError(DihalError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class BackboneNotFoundError(DihalError):
    pass


class ModelLoadError(DihalError):
    """A model that loads but is not the model: weights missing from its folder (transformers
    would draw them at random at each load), or upper layers that, replayed from its own hidden
    states, do not give its own logits. The message names the folder, what differs and the fix."""


class LayerIndexError(DihalError, IndexError):
    pass


class CorpusError(DihalError):
    pass


class MalformedLineError(CorpusError):
    pass


class TokenizerError(DihalError, ValueError):
    """A tokenizer that cannot make the sequences (no EOS to end a document); the message names
    its model folder and the fix."""


class InvalidOutputError(DihalError):
    """A stage's result that breaks what its config and its inputs promise (token ids outside
    the vocabulary, fewer sequences than asked): refused before its manifest is written."""


class TooFewError(DihalError, ValueError):
    """An upstream artifact holds fewer items than a stage's config asks for (held-out
    sequences for eval_sequences): refused before any work, never measured on fewer."""


class StateValueError(DihalError):
    """Hidden states that cannot be stored faithfully (NaN/inf, fp16 overflow)."""


class CorruptArtifactError(DihalError):
    """An artifact on disk cannot be read; the message names the path and the fix."""


class ArtifactLockedError(DihalError):
    """Another process is making the same artifact; the message names it."""


class UnsafePathError(DihalError):
    """A symbolic link (or a hard-linked or foreign file) where dihal writes inside the
    artifact root: refused by name, never followed."""


class DiskFullError(DihalError):
    """A write failed for want of space; the message names the disk, the space and the fix."""


class StaleArtifactError(DihalError):
    """An artifact made from an upstream that has been made again since, from other inputs:
    never read as if it belonged to the chain; the message names it and the command."""


class MissingArtifactError(DihalError):
    """An upstream artifact has not been made yet; the message names the command that makes it."""


class TrainingError(DihalError):
    """Training stopped (non-finite loss or gradient); `step` is the update that failed."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step

    def __reduce__(self):  # pickles with its step (default pickling would drop it)
        return type(self), (self.args[0], self.step)


class TrainingBudgetError(DihalError, ValueError):
    """A training whose optimiser steps exceed dihal.config.MAX_TRAIN_STEPS, refused before
    it starts; the message names the steps, how they were counted, the limit and the fix."""


class CheckpointMismatchError(DihalError, ValueError):
    """A checkpoint to resume from was written under another training protocol."""


class JudgeChoiceError(DihalError, ValueError):
    """The judge asked for would score its own samples (the judge is the backbone)."""


class CheckpointDamagedError(DihalError, ValueError):
    """A training checkpoint does not match its digests (a changed, truncated or missing file),
    or has none: it is never read as data."""


class UnsupportedArchitectureError(DihalError, ValueError):
    """A model whose layout the hidden-state and hybrid code does not support; the message
    names the supported families."""


class BackboneDeclarationError(DihalError, ValueError):
    """A declared backbone (dihal.toml's [backbones] table, or the driver's --backbone) that
    is malformed; the message names the file, the entry and the fix."""


class SettingError(DihalError, ValueError):
    """A setting read from the process environment that is not of its type or out of its
    range; the message names the variable, its value, what is allowed and the fix."""


class BackboneMismatchError(DihalError, ValueError):
    """A bridge given a backbone other than the one it was made on; the message names both."""


class ContextLengthError(DihalError, ValueError):
    """A prompt or text longer than a model takes; the message names the lengths and the fix."""


class SavedHybridError(DihalError):
    """A folder that is not a saved hybrid, or one whose files changed since it was saved; the
    message names the folder and the fix."""
