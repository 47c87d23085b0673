"""What a person's erasure does to a memory layer's state in a thread shared with others
(agentd.store.writes.ErasePerson): their exchanges there become tombstones, so whatever a layer
derived from the thread's messages must not outlive them.

Each strategy declares the keys it writes into `LayerState.data` and what an erasure does to each
(`LAYER_KEYS`, beside the code that writes them); the erasure collects them from every registered
kind (agentd/memory/registry.py), so a new key cannot be forgotten here. A strategy that keeps no
layer state declares nothing. tests/memory/test_layer_keys.py drives every kind and checks that
what it stored is declared.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass

from agentd.memory import registry


class Erasure(enum.Enum):
    """What an erasure in a shared thread does to one layer-state key."""

    # text made from the thread's messages (state's Σ, summarized's rolling summary): the whole
    # layer state is deleted, so the layer starts over from the thread as it now reads
    REBUILD = "rebuild"
    # a part that quotes what someone said (episodic's last recall: the query and what it found):
    # removed, the rest of the state (and the layer's cursor) kept
    DROP = "drop"


@dataclass(frozen=True, slots=True)
class LayerErasure:
    """The keys of every strategy, by what an erasure does to them (ErasePerson's two fields)."""

    rebuild: tuple[str, ...]
    drop: tuple[str, ...]


def declared_keys(kind: str) -> Mapping[str, Erasure]:
    """The layer-state keys strategy `kind` declares (none when it keeps no layer state)."""
    keys: Mapping[str, Erasure] = getattr(registry.strategy_class(kind), "LAYER_KEYS", {})
    return keys


@functools.cache
def layer_erasure() -> LayerErasure:
    """Every registered strategy's keys, collected once (importing each strategy's module on first use)."""
    declared = [(key, what) for kind in registry.STRATEGY_KINDS for key, what in declared_keys(kind).items()]
    return LayerErasure(
        tuple(sorted({k for k, what in declared if what is Erasure.REBUILD})),
        tuple(sorted({k for k, what in declared if what is Erasure.DROP})),
    )
