"""`agentd init [DIR]`: a folder to start from — agents/ with a commented example, and agentd.yaml with
every setting commented — written only where nothing would be overwritten."""

from __future__ import annotations

import argparse
from importlib.resources import files
from pathlib import Path

from agentd.errors import OperatorError

TEMPLATES = files("agentd.cli") / "templates"


def init_folder(root: Path) -> list[Path]:
    """Write root/agents/assistant.yaml and root/agentd.yaml; returns them. Refuses (writing nothing)
    when either exists."""
    targets = {root / "agents" / "assistant.yaml": "assistant.yaml", root / "agentd.yaml": "agentd.yaml"}
    existing = [path for path in targets if path.exists()]
    if existing:
        verb = "exists" if len(existing) == 1 else "exist"
        raise OperatorError(f"{' and '.join(map(str, existing))} already {verb}: nothing was written")
    (root / "agents").mkdir(parents=True, exist_ok=True)
    for path, template in targets.items():
        path.write_text((TEMPLATES / template).read_text(encoding="utf-8"), encoding="utf-8")
    return list(targets)


def cmd_init(args: argparse.Namespace) -> int:
    root: Path = args.dir
    for path in init_folder(root):
        print(f"wrote {path}")
    where = "" if root.resolve() == Path.cwd().resolve() else f"cd {root} && "
    print(
        f"next: {where}agentd run     (the example agent answers on the built-in offline model), then\n"
        "  curl -s -X POST localhost:8765/agents/assistant/messages -H 'content-type: application/json' \\\n"
        '    -d \'{"conversation_id": "demo", "text": "remember city: Lisbon"}\''
    )
    return 0
