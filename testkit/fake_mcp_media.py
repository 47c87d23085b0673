"""A real MCP server whose tools return files, for the tests of files from tools (the SDK's server API):

    picture(side, color, noisy)   a PNG of side x side pixels (noisy: random pixels, so it is large)
    sound()                       a short WAV tone (AudioContent)
    chart()                       a text line and a PNG as an embedded blob resource (file:///charts/chart.png)

Run it over stdio with `media_command()`; the bytes of each are those `picture_bytes` etc. make here.
"""

from __future__ import annotations

import io
import math
import os
import random
import struct
import sys
import wave
from pathlib import Path

import mcp_types as types
from mcp.server import MCPServer
from mcp.server.mcpserver import Audio, Image
from PIL import Image as PILImage


def picture_bytes(side: int = 8, color: str = "red", noisy: bool = False) -> bytes:
    image = PILImage.new("RGB", (side, side), color)
    if noisy:
        rng = random.Random(side)
        image.putdata(
            [(rng.randrange(256), rng.randrange(256), rng.randrange(256)) for _ in range(side * side)]
        )
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def sound_bytes() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(i / 5))) for i in range(800)))
    return out.getvalue()


def build_server() -> MCPServer:
    server = MCPServer("fake-media", log_level="WARNING")

    @server.tool()
    def picture(side: int = 8, color: str = "red", noisy: bool = False) -> Image:
        """Draw a square picture."""
        return Image(data=picture_bytes(side, color, noisy), format="png")

    @server.tool()
    def sound() -> Audio:
        """Play a short tone."""
        return Audio(data=sound_bytes(), format="wav")

    @server.tool()
    def chart() -> list[types.ContentBlock]:
        """A chart, as an embedded resource."""
        import base64

        blob = types.BlobResourceContents(
            uri="file:///charts/chart.png",
            mime_type="image/png",
            blob=base64.b64encode(picture_bytes(4, "blue")).decode(),
        )
        return [
            types.TextContent(type="text", text="the chart:"),
            types.EmbeddedResource(type="resource", resource=blob),
        ]

    return server


def media_command() -> list[str]:
    """The command that runs this server over stdio with this Python."""
    repo = str(Path(__file__).resolve().parents[1])
    return [
        sys.executable,
        "-c",
        f"import sys; sys.path.insert(0, {repo!r}); import testkit.fake_mcp_media as m; m.main()",
    ]


def main() -> None:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    build_server().run("stdio")


if __name__ == "__main__":
    main()
