"""The agents folder, watched: which agent files are new, changed or gone since the last look.

Polling (mtime_ns and size per file) rather than inotify: it works the same on
every filesystem (network mounts, containers' bind mounts) and costs a few
stat calls a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentd.config.folder import agent_sources

Fingerprint = tuple[tuple[int, int], ...]  # (mtime_ns, size) of each file naming the agent


@dataclass
class Changes:
    changed: dict[str, Path] = field(default_factory=dict)  # new or edited: name -> file
    removed: list[str] = field(default_factory=list)


class FolderWatcher:
    def __init__(self, agents_dir: Path):
        self.agents_dir = agents_dir
        self._seen: dict[str, Fingerprint] = {}

    def scan(self) -> Changes:
        """What changed since the previous scan (everything, the first time)."""
        changes = Changes()
        present: dict[str, Fingerprint] = {}
        for name, paths in agent_sources(self.agents_dir).items():
            try:
                # every file naming the agent: x.yml appearing beside x.yaml is a change (refused as a twin)
                fingerprint = tuple((st.st_mtime_ns, st.st_size) for st in (p.stat() for p in paths))
            except OSError:
                continue  # deleted between the listing and the stat: gone next time
            present[name] = fingerprint
            if self._seen.get(name) != fingerprint:
                changes.changed[name] = paths[0]
        changes.removed = sorted(set(self._seen) - set(present))
        self._seen = present
        return changes
