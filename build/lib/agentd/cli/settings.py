"""agentd.yaml as the CLI finds it: --config, else beside the agents folder."""

from __future__ import annotations

import argparse

from agentd.config.loader import parse_daemon
from agentd.config.models import DaemonSpec


def settings_of(args: argparse.Namespace) -> DaemonSpec:
    config = getattr(args, "config", None)
    return parse_daemon(config if config is not None else args.agents.parent / "agentd.yaml")
