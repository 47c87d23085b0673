"""agentd: a daemon that hosts LLM agents defined in YAML."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("agentd")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
