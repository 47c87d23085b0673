"""`people:` in agentd.yaml: accounts the operator declares to be one person.

    people:
      ana: [slack:U012AB, telegram:42]

A person's name is never an account (it has no ':'), so a name and an account are never confused.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from agentd.events import USER_ID_FORM, is_user_id

PERSON_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
PERSON_NAME_FORM = "1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
ACCOUNT_PATTERN = r"^[a-z][a-z0-9_]*:[^\x00-\x20\x7f-\xa0/]{1,128}$"  # the user id: agentd.events's rule
ACCOUNT_FORM = f"<channel>:<user id>, e.g. telegram:42 (a user id is {USER_ID_FORM})"
_PERSON_RE = re.compile(PERSON_NAME_PATTERN)
_CHANNEL_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def is_person_name(value: str) -> bool:
    return _PERSON_RE.fullmatch(value) is not None


def is_account(value: str) -> bool:
    channel, _, user_id = value.partition(":")
    return bool(_CHANNEL_RE.fullmatch(channel)) and is_user_id(user_id)


def _account(value: str) -> str:
    if not is_account(value):
        raise ValueError(f"{value!r} is not an account: write {ACCOUNT_FORM}")
    return value


Account = Annotated[str, AfterValidator(_account), Field(json_schema_extra={"pattern": ACCOUNT_PATTERN})]
DeclaredPeople = Annotated[
    dict[str, Annotated[list[Account], Field(min_length=1)]],
    Field(json_schema_extra={"propertyNames": {"pattern": PERSON_NAME_PATTERN}}),
]


def check_people(people: dict[str, list[str]]) -> dict[str, list[str]]:
    """Names well formed, and no account declared for two people."""
    owner: dict[str, str] = {}
    for person, accounts in people.items():
        if not is_person_name(person):
            raise ValueError(f"person name {person!r} must be {PERSON_NAME_FORM}")
        for account in accounts:
            if owner.setdefault(account, person) != person:
                raise ValueError(f"account {account} is declared for both {owner[account]} and {person}")
    return people
