"""Free text to search terms: the topical words of a question, for keyword search and coverage."""

from __future__ import annotations

import re

# Words that carry no topic: dropped from keyword queries so "what did I say about X" searches X.
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves tell remind know remember said say says told please again earlier ago""".split()
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
MAX_QUERY_TERMS = 24


def keyword_terms(text: str) -> list[str]:
    """The topical words of free text, lower-cased, in order, without repeats or stopwords."""
    terms: list[str] = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS or (len(word) < 2 and not word.isdigit()) or word in terms:
            continue
        terms.append(word)
        if len(terms) == MAX_QUERY_TERMS:
            break
    return terms
