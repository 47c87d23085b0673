"""The secret detectors: what each must find, and the table of inputs none may touch."""

from __future__ import annotations

import time

import pytest

from agentd.memory.secrets import DETECTORS, find_secrets, marker, redact

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5"
    "MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
RSA_KEY = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw\n"
    "7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFc\n"
    "-----END RSA PRIVATE KEY-----"
)

# (detector, text holding one secret, the secret)
FOUND = [
    ("openai_key", "my key: sk-proj-Ab3dEfGh1JkLmNoPqRsTuVwXyZ0123456789abcd ok", None),
    ("openai_key", "OPENAI_API_KEY=sk-Ab3dEfGh1JkLmNoPqRsTT3BlbkFJuVwXyZ0123456789abcd", None),
    ("anthropic_key", "use sk-ant-api03-" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_" * 2 + "AA please", None),
    ("aws_access_key", "aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_access_key", "temporary ASIAY34FZKBOKMUTVV7A here", "ASIAY34FZKBOKMUTVV7A"),
    (
        "github_token",
        "token ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789.",
        "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    ),
    (
        "github_token",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW",
        None,
    ),
    ("slack_token", "bot: xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", None),
    ("slack_token", "xoxp-123456789012-123456789012-1234567890123-0123456789abcdef0123456789abcdef", None),
    ("jwt", f"Authorization: Bearer {JWT}", JWT),
    ("private_key", f"here it is:\n{RSA_KEY}\nthanks", RSA_KEY),
    (
        "private_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB",
        None,
    ),
    (
        "private_key",
        '{"key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\\n"}',
        None,
    ),
    ("card_number", "card 4111 1111 1111 1111 exp 12/26", "4111 1111 1111 1111"),
    ("card_number", "4242424242424242", "4242424242424242"),
    ("card_number", "mc 5555-5555-5555-4444.", "5555-5555-5555-4444"),
    ("card_number", "2-series 2223003122003222", "2223003122003222"),
    ("card_number", "amex 3782 822463 10005", "3782 822463 10005"),
    ("card_number", "amex 378282246310005,", "378282246310005"),
    ("card_number", "discover 6011111111111117", "6011111111111117"),
]

# Inputs that must never trigger: ids, hashes, ordinary numbers, prose about secrets.
NOT_SECRETS = [
    "123e4567-e89b-12d3-a456-426614174000",  # UUID
    "f47ac10b-58cc-4372-a567-0e02b2c3d479",  # UUID v4
    "request 550e8400e29b41d4a716446655440000 failed",  # UUID without dashes
    "9fceb02d0ae598e95dc970b74767f19372d61af8",  # git SHA
    "fixed in 9fceb02 and a1b2c3d",  # short SHAs
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # sha256
    "1234567890123456789012345678901234567890",  # a SHA that is all digits
    "4111111111111112",  # card-shaped, fails Luhn
    "1234567812345670",  # passes Luhn, no card network starts with 1
    "79927398713",  # the textbook Luhn example: too short for a card
    "9999999999999995",  # passes Luhn, starts with 9
    "1700000000000",  # a timestamp in milliseconds
    "1700000000.123456",
    "20240301120000",  # a compact date-time
    "18446744073709551615",  # 2**64 - 1
    "3.14159265358979323846",
    "1,234,567,890,123.45",
    "+1 (555) 123-4567 or +44 20 7946 0958",
    "ISBN 978-3-16-148410-0",
    "GB82 WEST 1234 5698 7654 32",  # an IBAN: not a card, not a secret here
    "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "order 4111-1111-1111-1111-2222",  # more groups than a card has
    "v1.2.3, #ff00aa, 10.0.0.1, 00:1B:44:11:3A:B7",
    "sk-learn-pipeline-2024-final-version",  # a slug, not a key
    "task-AbCdEfGh1JkLmNoPqRsTuVwXyZ012345",  # sk- inside a word
    "the sk- prefix, sk-ant- keys, AKIA ids, ghp_ tokens and xoxb- tokens are secrets",
    "xoxo-123456789012-abcdefghijklmnopqrstuvwx",  # hugs and kisses
    "BAKIAIOSFODNN7EXAMPLEX",  # AKIA inside a longer word
    "eyJxxxxxxxxxxxx.eyJyyyyyyyyyyyyyy.zzzzzzzzzzzzzzzz",  # JWT-shaped, header is not JSON
    "dGhpcyBpcyBqdXN0IGJhc2U2NCBmb3IgdGVzdGluZw==",  # plain base64
    "a PEM file starts with -----BEGIN PRIVATE KEY----- and ends with its END line",
    "[REDACTED:openai_key] [REDACTED:card_number]",  # markers are not secrets themselves
]


@pytest.mark.parametrize(("detector", "text", "secret"), FOUND)
def test_each_detector_finds_its_secret_and_redacts_it_with_a_marker_naming_the_kind(
    detector: str, text: str, secret: str | None
) -> None:
    [hit] = find_secrets(text)
    assert hit.detector == detector
    if secret is not None:
        assert text[hit.start : hit.end] == secret
    redacted = redact(text)
    assert marker(detector) in redacted.text and redacted.found == {detector: 1}
    assert text[hit.start : hit.end] not in redacted.text
    assert find_secrets(redacted.text) == []  # redaction is final: a marker is never a secret


def test_every_detector_is_tested() -> None:
    assert {d for d, _, _ in FOUND} == set(DETECTORS)


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert find_secrets(text) == []
    assert redact(text).text == text


def test_several_secrets_in_one_text_are_each_replaced_in_place() -> None:
    text = f"key AKIAIOSFODNN7EXAMPLE, card 4242 4242 4242 4242 and {JWT} done"
    redacted = redact(text)
    assert (
        redacted.text == "key [REDACTED:aws_access_key], card [REDACTED:card_number] and [REDACTED:jwt] done"
    )
    assert redacted.found == {"aws_access_key": 1, "card_number": 1, "jwt": 1}


def test_a_private_key_is_one_secret_whatever_its_body_holds() -> None:
    # a PEM body can hold token-shaped runs: the whole block is the one secret
    text = f"{RSA_KEY[:-30]}AKIAIOSFODNN7EXAMPLE\n{RSA_KEY[-30:]}"
    assert [h.detector for h in find_secrets(text)] == ["private_key"]
    assert redact(text).text == "[REDACTED:private_key]"


def test_a_crafted_paste_cannot_make_screening_slow() -> None:
    # header-like lines after a BEGIN line once made the PEM detector backtrack exponentially (25: ~6 s)
    crafted = "-----BEGIN PRIVATE KEY-----\n" + "a:\\n " * 2000 + "!"
    started = time.perf_counter()
    assert find_secrets(crafted) == []
    assert time.perf_counter() - started < 1.0
