"""The Responses API's content parts of a user message, read: its text, and its files as the engine
takes them (agentd.events.Attachment), by the same code and limits as Chat Completions' parts.

- `input_text` (and `output_text`, `text`): the text;
- `input_image`: `image_url`, a data URL of an image or an http(s) URL (fetched only under the agent's
  media.allowed_urls, when the turn asks);
- `input_file`: `file_data`, a data URL or bare base64 (its type read from `filename`), or a `file_url`
  under media.allowed_urls; a PDF or a text file is read to the model as every channel's documents are;
- `input_audio`: base64 `data` in a `format` of wav or mp3, as on Chat Completions.
A `file_id` is refused (agentd has no Files API), naming the parameter, as is anything malformed:
`param` is the part's path (`input[0].content[1].file_id`), as OpenAI names it.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Sequence
from typing import Any

from agentd.events import Attachment
from agentd.http.errors import ApiError
from agentd.http.media_in import at_most, audio_of, by_url, data_url, decoded, image_of, kind_of

TEXT_PARTS = ("input_text", "output_text", "text")
MEDIA_PARTS = {"input_image": "an image", "input_file": "a file", "input_audio": "audio"}
NO_FILES_API = "agentd has no Files API: send the file itself"


def response_parts(
    parts: Sequence[dict[str, Any]], where: str, allowed_urls: Sequence[str]
) -> tuple[str, tuple[Attachment, ...]]:
    """A user message's parts (`where`: `input[i]`): its text, and its files as attachments."""
    texts: list[str] = []
    files: list[Attachment] = []
    for j, part in enumerate(parts):
        at = f"{where}.content[{j}]"
        kind = part.get("type")
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "input_image":
            files.append(_image(part, at, allowed_urls))
        elif kind == "input_file":
            files.append(_file(part, at, allowed_urls))
        elif kind == "input_audio":
            files.append(audio_of(part.get("input_audio"), f"{at}.input_audio", f"{at}.input_audio"))
        else:
            raise ApiError(400, f"{at}: {_not_taken(kind)}", param=at)
    return "".join(texts), at_most(files, where, where)


def earlier_text(parts: Sequence[dict[str, Any]], where: str) -> str:
    """The text of a message (of an earlier one, a stateless call sending the whole conversation each
    time): its files are said to have been there, not taken again."""
    texts = []
    for j, part in enumerate(parts):
        kind = part.get("type")
        if kind in MEDIA_PARTS:
            texts.append(f"[{MEDIA_PARTS[kind]} sent earlier]")
        elif kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise ApiError(400, f"{where}.content[{j}]: {_not_taken(kind)}", param=f"{where}.content[{j}]")
    return "".join(texts)


def _not_taken(kind: Any) -> str:
    return f"a {kind!r} content part; agents take input_text, input_image, input_file and input_audio"


def _image(part: dict[str, Any], at: str, allowed_urls: Sequence[str]) -> Attachment:
    url = part.get("image_url")
    if part.get("file_id") is not None and url is None:
        raise ApiError(400, f"{at}.file_id: {NO_FILES_API} as image_url (a data URL)", param=f"{at}.file_id")
    if not isinstance(url, str):
        raise ApiError(
            400, f"{at}.image_url: a data URL or an http(s) URL is required", param=f"{at}.image_url"
        )
    return image_of(url, f"{at}.image_url", allowed_urls, f"{at}.image_url")


def _file(part: dict[str, Any], at: str, allowed_urls: Sequence[str]) -> Attachment:
    data, url, name = part.get("file_data"), part.get("file_url"), part.get("filename")
    if part.get("file_id") is not None and data is None and url is None:
        raise ApiError(
            400, f"{at}.file_id: {NO_FILES_API} as file_data (a data URL) or file_url", param=f"{at}.file_id"
        )
    if name is not None and (not isinstance(name, str) or len(name) > 255):
        raise ApiError(400, f"{at}.filename: a name of at most 255 characters", param=f"{at}.filename")
    guessed = mimetypes.guess_type(name or (url if isinstance(url, str) else ""))[0]
    if isinstance(data, str) and url is None:
        param = f"{at}.file_data"
        if data.startswith("data:"):
            mime, raw = data_url(data, param, param)
            mime = mime or guessed
        else:
            mime, raw = guessed, decoded(data, param, 400, param)
        return Attachment(kind_of(mime), mime, name, len(raw), raw)
    if isinstance(url, str) and data is None:
        where = f"{at}.file_url"
        return by_url(url, where, allowed_urls, where, kind_of(guessed), name, guessed)
    raise ApiError(400, f"{at}: give the file as file_data or file_url, one of them", param=at)
