"""Errors that name the thing that is wrong and how to fix it."""


class DihalError(RuntimeError):
    """Base class: every message says what is wrong and what to do about it."""


class UnknownBackboneError(DihalError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0]


class BackboneNotFoundError(DihalError):
    pass


class LayerIndexError(DihalError, IndexError):
    pass


class CorpusError(DihalError):
    pass


class MalformedLineError(CorpusError):
    pass


class StateValueError(DihalError):
    """Hidden states that cannot be stored faithfully (NaN/inf, fp16 overflow)."""
