"""The agents folder, watched: which agent files are new, changed or gone since the last look.

Polling (mtime_ns and size per file) rather than inotify: it works the same on
every filesystem (network mounts, containers' bind mounts) and costs a few
stat calls a second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agentd.config.loader import agent_files

Fingerprint = tuple[int, int]


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
        for path in agent_files(self.agents_dir):
            try:
                st = path.stat()
            except OSError:
                continue  # deleted between the listing and the stat: gone next time
            present[path.stem] = fingerprint = (st.st_mtime_ns, st.st_size)
            if self._seen.get(path.stem) != fingerprint:
                changes.changed[path.stem] = path
        changes.removed = sorted(set(self._seen) - set(present))
        self._seen = present
        return changes
