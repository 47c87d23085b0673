"""deploy/: the systemd unit parses and is hardened, the Dockerfile copies what exists and runs a command
agentd accepts. (No container engine here: the image itself is never built by the tests.)"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentd.cli.main import build_parser
from agentd.config.http_store import is_loopback
from agentd.config.loader import parse_daemon
from agentd.daemon.fleet import DRAIN_TIMEOUT
from agentd.errors import ConfigError

ROOT = Path(__file__).parent.parent
UNIT = ROOT / "deploy" / "agentd.service"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "CapabilityBoundingSet": "",
    "RestrictSUIDSGID": "yes",
    "SystemCallArchitectures": "native",
}


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=True, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read_string(UNIT.read_text())
    return parser


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """`systemd-analyze verify` on the unit, its ExecStart pointed at this agentd (verify wants a binary)."""
    installed = Path(sys.executable).parent / "agentd"
    copy = tmp_path / "agentd.service"
    copy.write_text(UNIT.read_text().replace("/opt/agentd/bin/agentd", str(installed)))
    checked = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60, check=False
    )
    # an unknown or misspelt key is only a warning to systemd: here it fails
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def test_the_unit_runs_agentd_as_its_own_user_sandboxed_and_restarted() -> None:
    service = unit()["Service"]
    assert service["User"] == service["Group"] == "agentd"
    assert service["Restart"] == "on-failure"
    assert {key: service.get(key) for key in HARDENING} == HARDENING
    # the command is one agentd accepts, with the data where systemd gives the service room to write
    command = shlex.split(service["ExecStart"])
    assert command[0] == "/opt/agentd/bin/agentd"
    args = build_parser().parse_args(command[1:])
    assert args.func.__name__ == "cmd_run"
    assert args.data == Path("/var/lib") / service["StateDirectory"]
    assert args.agents.parent == args.config.parent == Path("/etc") / service["ConfigurationDirectory"]
    # stopping waits for the drain (in-flight runs) before systemd kills
    assert float(service["TimeoutStopSec"].removesuffix("s")) > DRAIN_TIMEOUT
    assert unit()["Install"]["WantedBy"] == "multi-user.target"


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of each instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_dockerfile_copies_what_exists_and_runs_as_a_user_with_a_volume_and_a_healthcheck() -> None:
    instructions = dockerfile()
    for instruction, args in instructions:
        if instruction == "COPY":
            *sources, _target = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such path in the repository"
    ignored = (ROOT / "deploy" / "Dockerfile.dockerignore").read_text()
    copied = [s for i, a in instructions if i == "COPY" for s in shlex.split(a)[:-1]]
    assert all(f"!{source}" in ignored for source in copied)  # the build context keeps each of them
    values = {instruction: args for instruction, args in instructions}
    assert values["USER"] not in ("root", "0")
    assert "/healthz" in values["HEALTHCHECK"]
    [volume] = json.loads(values["VOLUME"])  # a JSON array
    command = json.loads(values["ENTRYPOINT"]) + json.loads(values["CMD"])
    assert command[0] == "agentd"
    args = build_parser().parse_args(command[1:])
    assert args.func.__name__ == "cmd_run" and args.data == Path(volume)
    # the container listens beyond loopback, so its agentd.yaml demands the token
    with pytest.raises(ConfigError, match="environment variable AGENTD_TOKEN is not set"):
        parse_daemon(ROOT / "deploy" / "agentd.yaml", env={})
    settings = parse_daemon(ROOT / "deploy" / "agentd.yaml", env={"AGENTD_TOKEN": "t"})
    assert not is_loopback(settings.http.host) and settings.http.token == "t"
    assert values["EXPOSE"] == str(settings.http.port)


def test_there_is_a_license() -> None:
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_the_deploy_files_agree_on_the_drain_and_the_stop_timeout() -> None:
    """Once 30 s in the unit's comment and 45 s in deploy/README (issue 17, item 24): the drain is
    DRAIN_TIMEOUT everywhere it is named, and every stop timeout is the unit's TimeoutStopSec."""
    stop = int(unit()["Service"]["TimeoutStopSec"].removesuffix("s"))
    texts = {p.name: p.read_text() for p in (UNIT, DOCKERFILE, ROOT / "deploy" / "README.md")}
    drains = {
        (name, int(n))
        for name, text in texts.items()
        for n in re.findall(r"(?:up to|drains?[^.\n]*?) \(?(\d+) s\b", text)
    }
    assert drains and all(n == DRAIN_TIMEOUT for _, n in drains), drains
    timeouts = {int(n) for text in texts.values() for n in re.findall(r"(?:stop -t |waits )(\d+)", text)}
    assert timeouts == {stop}
    assert stop > DRAIN_TIMEOUT
