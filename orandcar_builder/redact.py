"""Secrets never reach a file the build writes: what counts as one, and how it is hidden.

A value is secret by what it is, whatever the option holding it is called:

- first, an option the engine declares secret (``SECRET_OPTIONS`` on the engine class, e.g. the
  openai_compat engine's ``api_key``), whatever its name and at any depth of the settings; then,
  as a second net, any option or mapping key whose name ends in a word of ``SECRET_WORDS``
  (``api_key``, ``hf_token``, ``client_secret``, ``password``, ``Authorization``,
  ``extra_headers``, ...; ``max_tokens``, ``stop_token_ids`` and ``tokenizer`` are not secrets);
  such a value becomes ``SET`` ("set"), so a card or manifest still says that it was given, and
  wherever that value also stands inside another string of the same settings it becomes ``HIDDEN``;
- the user-info of a URL (``https://user:pass@host``), anywhere in any string: it becomes
  ``HIDDEN``, as do query parameters with a secret or declared name (``?api_key=...``);
- a string that has the shape of a credential on its own (``Bearer ...``, ``sk-...``, ``hf_...``,
  ``ghp_...``): ``SET`` as an option value, ``HIDDEN`` inside a text.

``redact`` is for settings (options, fingerprints, recipes); ``scrub`` is for texts (error
messages), which may also be given the exact secret values to hide (an engine knows its own).
A redacted fingerprint keys the generation cache, so a changed key regenerates nothing.
Imports nothing from the package.
"""

from __future__ import annotations

import re
from typing import Any, Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

SET = "set"  # what a secret option's value becomes in every file the build writes
HIDDEN = "****"  # what a secret inside a text (a URL's user-info, an echoed key) becomes
# The last word of an option name that makes its value a secret.
SECRET_WORDS = frozenset({
    "key", "keys", "apikey", "token", "apitoken", "secret", "secrets", "password", "passwd", "pwd",
    "passphrase", "credential", "credentials", "auth", "authorization", "header", "headers", "cookie",
    "cookies", "bearer",
})
# Strings that are credentials by their shape alone.
# (their documented shapes, long enough that no model or file name is taken for one)
_CREDENTIAL = (r"(?:Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}|sk-[A-Za-z0-9_-]{20,}|hf_[A-Za-z0-9]{30,}"
               r"|gh[opsu]_[A-Za-z0-9]{30,}|glpat-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}")
CREDENTIAL = re.compile(rf"^\s*(?:{_CREDENTIAL})\s*$")
_CREDENTIAL_IN_TEXT = re.compile(rf"\b(?:{_CREDENTIAL})")
# scheme://user-info@ : the user-info ends at the first "@" before the host; it holds no "/", "?", "#"
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#@\s]+)@")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Texts shorter than this are not scrubbed by value: hiding every "pass" would garble the message.
MIN_SCRUBBED = 4


def words(name: str) -> list[str]:
    """The lower-case words of an option name: ``apiKey`` -> api, key; ``X-Api-Key`` -> x, api, key."""
    return [w.lower() for w in _WORDS.findall(str(name))]


def is_secret_name(name: Any, declared: Iterable[str] = ()) -> bool:
    """Whether an option (or mapping key) called ``name`` holds a secret: it is ``declared`` so,
    or its last word is a ``SECRET_WORDS`` word."""
    if str(name) in set(declared):
        return True
    parts = words(str(name))
    return bool(parts) and parts[-1] in SECRET_WORDS


def redact_url(text: str, declared: Iterable[str] = ()) -> str:
    """``text`` with every URL's user-info replaced by ``HIDDEN`` and the values of its query
    parameters that have a secret name (or one of the ``declared`` names) too."""
    declared = tuple(declared)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text)
    if "?" not in text or "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.scheme or not parts.query:
        return text
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(is_secret_name(k, declared) for k, _ in pairs):
        return text
    query = "&".join(f"{k}={HIDDEN if is_secret_name(k, declared) else v}" for k, v in pairs)
    return urlunsplit(parts._replace(query=query))


def redact(value: Any, declared: Iterable[str] = ()) -> Any:
    """A copy of the settings ``value`` (mappings, lists, scalars) with every secret hidden: the
    value of a declared or secret-named key becomes ``SET`` (whatever it is: a string, a mapping
    of headers); a credential-shaped string becomes ``SET``; URLs lose their user-info; a hidden
    value found inside any other string becomes ``HIDDEN`` there. ``declared``: the option names
    the engine says are secret (``SECRET_OPTIONS``), matched at any depth."""
    declared = tuple(declared)
    return _redacted(value, declared, _longest_first(secret_values(value, declared)))


def _redacted(value: Any, declared: tuple[str, ...], hidden: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: (SET if _given(v) and is_secret_name(k, declared) else _redacted(v, declared, hidden))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v, declared, hidden) for v in value]
    if isinstance(value, str):
        return SET if CREDENTIAL.match(value) else _replaced(redact_url(value, declared), hidden)
    return value


def _longest_first(values: Iterable[str]) -> list[str]:
    """The values ``scrub`` hides (long enough), longest first, so no part of one survives."""
    return sorted({v for v in values if v and len(v) >= MIN_SCRUBBED}, key=len, reverse=True)


def _replaced(text: str, values: list[str]) -> str:
    for value in values:
        text = text.replace(value, HIDDEN)
    return text


def _given(value: Any) -> bool:
    """Whether a secret-named option holds something to hide (not None, empty or a switch)."""
    return value is not None and value != "" and not isinstance(value, bool)


def secret_values(value: Any, declared: Iterable[str] = ()) -> set[str]:
    """The strings ``redact`` hides in ``value`` (a secret option's string leaves, URL passwords
    and user names), for ``scrub`` to hide in texts."""
    declared = tuple(declared)
    found: set[str] = set()

    def leaves(v: Any) -> Iterable[str]:
        if isinstance(v, dict):
            for item in v.values():
                yield from leaves(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                yield from leaves(item)
        elif v is not None and not isinstance(v, bool):
            yield str(v)

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, item in v.items():
                if is_secret_name(k, declared):
                    found.update(leaves(item))
                else:
                    walk(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
        elif isinstance(v, str):
            if CREDENTIAL.match(v):
                found.add(v.strip())
            for match in _USERINFO.finditer(v):
                user, _, password = match.group(2).partition(":")
                found.update(s for s in (password, match.group(2)) if s)
                if password:
                    found.add(user)

    walk(value)
    return {s for s in found if len(s) >= MIN_SCRUBBED}


def scrub(text: str, values: Iterable[str] = ()) -> str:
    """``text`` (a message) with URL user-info, credential-shaped words and each of ``values``
    (longest first) replaced by ``HIDDEN``."""
    text = _replaced(str(text), _longest_first(values))
    text = _CREDENTIAL_IN_TEXT.sub(HIDDEN, text)
    return _USERINFO.sub(lambda m: f"{m.group(1)}{HIDDEN}@", text)
