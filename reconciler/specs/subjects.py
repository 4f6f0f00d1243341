"""NATS subjects: validity, wildcard-aware overlap and subset tests.

Subjects are dot-separated tokens; ``*`` matches exactly one token and ``>`` (only as the
last token) matches one or more. Two subjects *overlap* when some literal subject matches
both; ``inner`` is a *subset* of ``outer`` when every literal subject matching ``inner``
also matches ``outer``.
"""

from __future__ import annotations

_FORBIDDEN_CHARS = frozenset(" \t\r\n")


def is_valid_subject(subject: str) -> bool:
    """True when ``subject`` is a well-formed subject or subject filter."""
    if not subject or any(ch in _FORBIDDEN_CHARS for ch in subject):
        return False
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if not token:
            return False
        if token == ">" and index != len(tokens) - 1:
            return False
        if len(token) > 1 and ("*" in token or ">" in token):
            return False
    return True


def subjects_overlap(first: str, second: str) -> bool:
    """True when at least one literal subject matches both filters."""
    if first == second or _under(first, second) or _under(second, first):
        return True  # what the token walk below finds too, without splitting
    a, b = first.split("."), second.split(".")
    for index in range(max(len(a), len(b))):
        if index >= len(a) or index >= len(b):
            return False
        ta, tb = a[index], b[index]
        if ta == ">" or tb == ">":
            return True
        if ta not in (tb, "*") and tb != "*":
            return False
    return len(a) == len(b)


def _under(subject: str, tail: str) -> bool:
    """Whether ``tail`` is ``P.>`` and ``subject`` is ``P.`` and more: the walk meets
    the same tokens up to ``>``, which matches whatever ``subject`` has there."""
    return tail[-2:] == ".>" and len(subject) >= len(tail) and subject.startswith(tail[:-1])


def is_subset(inner: str, outer: str) -> bool:
    """True when every subject matched by ``inner`` is matched by ``outer``."""
    a, b = inner.split("."), outer.split(".")
    for index, tb in enumerate(b):
        if tb == ">":
            return len(a) > index
        if index >= len(a):
            return False
        ta = a[index]
        if ta == ">":
            return False
        if tb not in ("*", ta):
            return False
    return len(a) == len(b)
