"""Seeds derived from a stable hash, never from Python's salted hash()."""

from __future__ import annotations

import hashlib


def derive_seed(base: int, *parts: object) -> int:
    """A 63-bit seed from (base, *parts): the same inputs give the same seed on every machine."""
    key = ":".join([str(int(base)), *(str(p) for p in parts)])
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1
