"""What a model reads of a document a person sends: a text-like file's text, a PDF's text page by
page (pypdf), up to `media.max_inline_chars`; anything else is named by its type and size only."""

from __future__ import annotations

import io
import logging

from pypdf import PdfReader
from pypdf.errors import PyPdfError

log = logging.getLogger(__name__)

# MIME types read as text besides text/*: structured data and source code as channels label them
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/csv",
        "application/javascript",
        "application/x-python",
        "application/x-sh",
        "application/sql",
    }
)
_TEXT_SUFFIXES = (
    ".txt .md .markdown .csv .tsv .json .jsonl .yaml .yml .toml .ini .cfg .conf .log .xml .html .css"
    " .py .js .ts .tsx .jsx .go .rs .java .kt .c .h .cc .cpp .hpp .cs .rb .php .sh .sql .swift .r .lua"
).split()
PDF = "application/pdf"


def is_text_like(mime_type: str, filename: str | None) -> bool:
    if mime_type.startswith("text/") or mime_type in _TEXT_TYPES or mime_type.endswith(("+json", "+xml")):
        return True
    return bool(filename) and filename.lower().endswith(tuple(_TEXT_SUFFIXES))  # type: ignore[union-attr]


def readable(data: bytes, mime_type: str, filename: str | None, max_chars: int) -> str | None:
    """The document's text as the model reads it (cut at `max_chars`, saying so), or None: it has no
    text agentd can read (a binary file, a PDF of scans)."""
    if mime_type == PDF or (filename or "").lower().endswith(".pdf"):
        return _pdf_text(data, max_chars)
    if not is_text_like(mime_type, filename):
        return None
    text = data.decode("utf-8", errors="replace")
    return _cut(text, max_chars)


def _pdf_text(data: bytes, max_chars: int) -> str | None:
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError) as e:  # a damaged or encrypted file
        log.info("a PDF could not be read: %s", e)
        return None
    if not any(p.strip() for p in pages):
        return f"a PDF of {len(pages)} page(s) without text (scanned pages?)"
    text = f"a PDF of {len(pages)} page(s)\n" + "\n".join(
        f"--- page {n} ---\n{page.strip()}" for n, page in enumerate(pages, 1)
    )
    return _cut(text, max_chars)


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n… (cut at media.max_inline_chars: {len(text)} characters in all)"
