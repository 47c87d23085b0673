"""Getting started: `agentd --version`, and `agentd init` writing a folder that checks and runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from agentd import __version__
from agentd.cli import main
from agentd.config.http_store import HttpSpec, StoreSpec
from agentd.config.loader import parse_daemon
from agentd.config.models import DaemonSpec
from agentd.daemon import Daemon
from agentd.http.app import create_app

SETTING = re.compile(r"^# (\s*[a-z_]+:.*)$")  # a commented setting, as opposed to a comment in prose


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"agentd {__version__}\n" and __version__[0].isdigit()


async def test_init_writes_a_folder_that_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "bot")]) == 0
    assert "wrote" in capsys.readouterr().out
    root = tmp_path / "bot"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "agentd.yaml",
        "agents",
        "agents/assistant.yaml",
    ]
    daemon = Daemon(root / "agents", root / "data", reload_interval=60)
    await daemon.start()
    try:
        transport = httpx.ASGITransport(app=create_app(daemon))
        async with httpx.AsyncClient(transport=transport, base_url="http://agentd") as client:
            body = {"conversation_id": "demo", "text": "remember city: Lisbon"}
            reply = (await client.post("/agents/assistant/messages", json=body)).json()
            assert reply == {**reply, "reply": "Remembered city.", "error": None}
    finally:
        await daemon.shutdown()


def test_init_checks_clean_and_refuses_to_overwrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    assert "next: agentd run" in capsys.readouterr().out
    assert main(["check"]) == 0
    assert capsys.readouterr().out == "ok: 1 agent(s): assistant\n"
    (tmp_path / "agentd.yaml").write_text("# mine\n")
    assert main(["init"]) == 1
    assert (
        "agents/assistant.yaml and agentd.yaml already exist: nothing was written" in capsys.readouterr().err
    )
    assert (tmp_path / "agentd.yaml").read_text() == "# mine\n"


def field_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    paths = set()
    for name, field in model.model_fields.items():
        inner: Any = field.annotation
        args = getattr(inner, "__args__", ())
        nested = [a for a in (inner, *args) if isinstance(a, type) and issubclass(a, BaseModel)]
        paths.add(prefix + name)
        for sub in nested:
            # providers: {name: ProviderSpec}: its fields under the example provider's name
            # (and prices: {model: PriceSpec}: under the example's model)
            example = {"providers": "groq.", "prices": "openai/gpt-4.1-mini."}.get(name, "")
            paths |= field_paths(sub, f"{prefix}{name}.{example}")
    return paths


def test_the_agentd_yaml_it_writes_shows_every_setting_with_its_default(tmp_path: Path) -> None:
    main(["init", str(tmp_path)])
    text = (tmp_path / "agentd.yaml").read_text()
    uncommented = "\n".join(SETTING.sub(r"\1", line) for line in text.splitlines()) + "\n"
    (tmp_path / "all.yaml").write_text(uncommented)
    spec = parse_daemon(tmp_path / "all.yaml", env={"GROQ_API_KEY": "k"})
    assert spec.http == HttpSpec() and spec.store == StoreSpec()  # the defaults, as shown
    assert spec.providers["groq"].model_dump() == {**spec.providers["groq"].model_dump(), "timeout_s": 60.0}
    shown = {".".join(path) for path in _keys(spec.model_dump(exclude_unset=True))}
    assert field_paths(DaemonSpec) <= shown, field_paths(DaemonSpec) - shown
    # and as written (everything commented) it is a valid file of defaults
    assert parse_daemon(tmp_path / "agentd.yaml", env={}) == DaemonSpec()


def _keys(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out = set()
    for key, value in data.items():
        out.add((*prefix, key))
        if isinstance(value, dict):
            out |= _keys(value, (*prefix, key))
        if isinstance(value, list):  # budgets: [{per: ...}]: the keys of its items, under its name
            for item in value:
                out |= _keys(item, (*prefix, key)) if isinstance(item, dict) else set()
    return out
