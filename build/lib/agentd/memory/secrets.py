"""Secrets in text: named detectors (pure functions) and redaction with a marker naming the kind.

A person pastes an API key into a chat and, without this, it sits in memory for
ever: in an episode, a fact, Σ, a summary, a persistent value. Each detector is
a function `text -> spans` with a name (the name is what the audit trail and
the marker say; the value never leaves this module).

False positives matter as much as misses: a redacted UUID or git SHA breaks the
memory it was in. So every detector looks for the shape the issuer gave its
secret, not for "long random strings":

- `anthropic_key`, `openai_key`: `sk-ant-…`, `sk-…` (`sk-proj-…`), at least 20
  characters after the prefix, mixing upper case, lower case and digits (a
  kebab-case slug such as `sk-learn-pipeline-2024` does not);
- `aws_access_key`: `AKIA…` / `ASIA…` and 16 upper-case letters or digits;
- `github_token`: `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` + 36 or more, or
  `github_pat_…`, mixing cases and digits;
- `slack_token`: `xoxb-`, `xoxp-`, `xoxa-`, `xoxe-`, `xoxr-`, `xoxs-` then
  numeric ids and a random tail (`xoxo` is hugs and kisses, not a token);
- `jwt`: three base64url segments whose first decodes to a JSON object
  (`eyJ….eyJ….…`);
- `private_key`: a PEM `-----BEGIN … PRIVATE KEY-----` block with a body (to
  its END line, or to the end of the text when it was cut off);
- `card_number`: 13-19 digits, bare or in the groups cards are printed in,
  whose first digits belong to a card network (2221-2720, 30, 34-39, 4, 5, 6)
  and that pass the Luhn check. A number that is not a card but passes both
  (one in ten of 16-digit numbers starting with 4, 5 or 6 pass Luhn) is
  redacted too: that is the cost of the detector the issue asks for.

Every detector requires a boundary on both sides (no letter or digit glued on),
so a secret-shaped run inside a longer identifier is left alone.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

Span = tuple[int, int]
Detector = Callable[[str], Iterator[Span]]


@dataclass(frozen=True, slots=True)
class Hit:
    detector: str
    start: int
    end: int


def marker(detector: str) -> str:
    """What a secret is replaced with: its kind, never any of its characters."""
    return f"[REDACTED:{detector}]"


def _mixes_cases_and_digits(token: str) -> bool:
    return (
        any(c.islower() for c in token)
        and any(c.isupper() for c in token)
        and any(c.isdigit() for c in token)
    )


def _shaped(pattern: str, check: Callable[[re.Match[str]], bool] | None = None, flags: int = 0) -> Detector:
    """A detector from a regular expression, optionally with a check on each match."""
    compiled = re.compile(pattern, flags)

    def detect(text: str) -> Iterator[Span]:
        for match in compiled.finditer(text):
            if check is None or check(match):
                yield match.span()

    return detect


def _random_body(match: re.Match[str]) -> bool:
    return _mixes_cases_and_digits(match.group("body"))


def _json_header(match: re.Match[str]) -> bool:
    """A JWT's first segment is base64url JSON: an object (`{"alg": …}`)."""
    segment = match.group("header")
    try:
        header = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(header, dict)


# Nothing word-like glued to either side: `task-…` holds no `sk-` key, `XAKIA…` no AWS key.
_START = r"(?<![A-Za-z0-9_-])"
_END = r"(?![A-Za-z0-9_-])"

_anthropic_key = _shaped(_START + r"sk-ant-(?P<body>[A-Za-z0-9_-]{32,})" + _END, _random_body)
_openai_key = _shaped(
    _START + r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?(?P<body>[A-Za-z0-9_-]{20,})" + _END, _random_body
)
_aws_access_key = _shaped(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])")
_github_token = _shaped(
    _START + r"(?:gh[pousr]_(?P<body>[A-Za-z0-9]{36,255})|github_pat_(?P<pat>[A-Za-z0-9_]{50,255}))" + _END,
    lambda m: _mixes_cases_and_digits(m.group("body") or m.group("pat")),
)
_slack_token = _shaped(
    _START + r"xox[abeprs]-\d+(?:-[A-Za-z0-9]+){1,4}" + _END, lambda m: len(m.group()) >= 30
)
_jwt = _shaped(
    _START + r"(?P<header>eyJ[A-Za-z0-9_-]{8,})\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{10,}" + _END,
    _json_header,
)
# A body of base64 (after any `Proc-Type:`-style headers) tells a key from prose naming the format;
# `\\n` allows a key pasted inside a JSON string. A header line stops at a backslash, so a line can be
# split one way only (no backtracking blow-up on a crafted paste).
_NL = r"(?:\s|\\n)*"
_private_key = _shaped(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
    + _NL
    + r"(?:[A-Za-z-]+:[^\n\\]*(?:\n|\\n)"
    + _NL
    + r")*[A-Za-z0-9+/=]{40}.*?(?:-----END (?P=label)-----|\Z)",
    flags=re.DOTALL,
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_network(digits: str) -> bool:
    """Whether the number starts the way a card network's numbers do (Visa, Mastercard, Amex,
    Discover, JCB, Diners, UnionPay, Maestro); a number starting with 0, 1, 7, 8 or 9 never is."""
    first = digits[0]
    if first in "456":
        return True
    if first == "3":
        return digits[1] in "0456789"
    return first == "2" and 2221 <= int(digits[:4]) <= 2720


# Bare digits, or the groups cards are printed in (4-4-4-4[-3], Amex/Diners 4-6-5/4-6-4) with one
# separator throughout; not part of a longer number (a decimal, a dashed id, more digit groups).
_CARD = re.compile(
    r"(?<![\w.])(?<!\d[-,])"
    r"(?:\d{13,19}|\d{4}(?P<s>[ -])\d{4}(?P=s)\d{4}(?P=s)\d{4}(?:(?P=s)\d{3})?|\d{4}(?P<t>[ -])\d{6}(?P=t)\d{4,5})"
    r"(?!\w|[.,-]\d)"
)


def _card_number(text: str) -> Iterator[Span]:
    for match in _CARD.finditer(text):
        digits = re.sub(r"[ -]", "", match.group())
        if _card_network(digits) and _luhn(digits):
            yield match.span()


# In the order overlaps are settled: a PEM block before any token inside it, sk-ant- before sk-.
DETECTORS: dict[str, Detector] = {
    "private_key": _private_key,
    "anthropic_key": _anthropic_key,
    "openai_key": _openai_key,
    "aws_access_key": _aws_access_key,
    "github_token": _github_token,
    "slack_token": _slack_token,
    "jwt": _jwt,
    "card_number": _card_number,
}


def find_secrets(text: str) -> list[Hit]:
    """Every secret in `text`, in order, none overlapping (the earlier start, then the earlier
    detector in DETECTORS, wins)."""
    hits = [Hit(name, start, end) for name, detect in DETECTORS.items() for start, end in detect(text)]
    if not hits:
        return []
    order = list(DETECTORS)
    hits.sort(key=lambda h: (h.start, order.index(h.detector)))
    kept: list[Hit] = []
    for hit in hits:
        if not kept or hit.start >= kept[-1].end:
            kept.append(hit)
    return kept


@dataclass(frozen=True, slots=True)
class Redacted:
    text: str
    found: Counter[str]  # detector name -> how many were replaced


def redact(text: str) -> Redacted:
    """`text` with each secret replaced by its marker, and what was found."""
    hits = find_secrets(text)
    if not hits:
        return Redacted(text, Counter())
    pieces: list[str] = []
    at = 0
    for hit in hits:
        pieces += [text[at : hit.start], marker(hit.detector)]
        at = hit.end
    pieces.append(text[at:])
    return Redacted("".join(pieces), Counter(hit.detector for hit in hits))
