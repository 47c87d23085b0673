"""What of a memory layer's state a person's erasure must not keep in a thread shared with others
(agentd.store.writes.ErasePerson): their exchanges there become tombstones, so whatever a layer
derived from the thread's messages is rebuilt from what is left."""

from __future__ import annotations

# layer states holding text made from the thread's messages (state's Σ, summarized's rolling
# summary): deleted, so the layer starts over from the thread as it now reads
REBUILT_LAYERS_HOLDING = ("sigma", "summary")
# parts of a layer state that quote what someone said (episodic's last recall: the query and what
# it found): dropped, the layer's cursor kept
DROPPED_LAYER_KEYS = ("last_recall",)
