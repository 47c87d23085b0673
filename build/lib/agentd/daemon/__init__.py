"""The composition root: the only package that names concrete classes (stores, providers, channels)."""

from agentd.daemon.daemon import Daemon
from agentd.daemon.resources import Resources
from agentd.daemon.server import EmbeddedServer

__all__ = ["Daemon", "EmbeddedServer", "Resources"]
