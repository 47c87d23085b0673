"""Everything agentd stores, behind one seam: reads and writes as data, backends that speak SQL."""

from agentd.store.base import Store

__all__ = ["Store"]
