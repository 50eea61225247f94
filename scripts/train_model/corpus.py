"""The corpus: every *.py under CORPUS_ROOT, split by file into training and held-out text."""
import hashlib
import os

from .settings import CORPUS_ROOT


def corpus_files():
    """All .py files of the corpus as sorted paths relative to CORPUS_ROOT."""
    out = []
    for d, dirs, files in os.walk(CORPUS_ROOT):
        dirs.sort()
        out += [os.path.relpath(os.path.join(d, f), CORPUS_ROOT)
                for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def is_heldout(rel):
    return int.from_bytes(hashlib.sha1(rel.encode()).digest()[:4], "little") % 100 < 5


def read_text(rel):
    with open(os.path.join(CORPUS_ROOT, rel), "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def is_generated(rel):
    """Generated data tables rather than code: the codec tables of encodings/, the HTML
    entity table and pydoc's help-topic text (together about a fifth of the tokens)."""
    return (rel.startswith("encodings/") and rel != "encodings/__init__.py") or \
        rel in ("pydoc_data/topics.py", "html/entities.py")
