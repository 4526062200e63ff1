"""The Hub's HTTP client as this package uses it: a time limit on every request, and token-free
error text. Low in the import levels, so ``publish``, ``diff`` and ``remote`` (which validates a
Hub revision and is used by ``publish`` after a push) can all use it."""

from __future__ import annotations

import contextlib
from typing import Iterator

import httpx2


def redact(text: str, token: str | None) -> str:
    """``text`` with every occurrence of the token replaced."""
    return text.replace(token, "<token>") if token else text


def _bound_request(timeout: float):
    """An httpx request hook that caps the request's connect, read, write and pool timeouts at
    ``timeout`` seconds. HfApi passes ``timeout=None`` (no limit) on most requests, and a request's
    own timeout overrides the client's ``timeout=``, so the limit goes onto each request as it is
    sent (``request.extensions["timeout"]``, the documented place httpx reads it from)."""

    def bound(request: httpx2.Request) -> None:
        limits = dict(request.extensions.get("timeout") or {})
        for key in ("connect", "read", "write", "pool"):
            value = limits.get(key)
            limits[key] = timeout if value is None else min(value, timeout)
        request.extensions["timeout"] = limits

    return bound


@contextlib.contextmanager
def hub_timeout(timeout: float) -> Iterator[None]:
    """Every request of huggingface_hub's shared client inside the block gets ``timeout`` seconds
    (positive: ``push`` checks it) per connect, read and write (the client's own default is no
    limit); restored after. Blocks nest: the shortest limit holds.

    Public API only: ``huggingface_hub.get_session()`` (the shared ``httpx`` client every HfApi,
    HfFileSystem and download call sends through) and httpx's ``Client.event_hooks``. The hook is
    added to that client and removed after, so a client factory the caller installed, and the
    hooks huggingface_hub puts on its client, stay as they are. Not ``set_client_factory``: a
    factory building a client with ``timeout=`` does not bound HfApi's requests (each passes its
    own ``timeout=None``), and a replaced factory cannot be put back (there is no public getter).
    The async client (``set_async_client_factory``) serves only the inference API, which no
    command here calls."""
    from huggingface_hub import get_session

    client = get_session()
    hook = _bound_request(timeout)
    hooks = client.event_hooks
    client.event_hooks = {**hooks, "request": [*hooks["request"], hook]}
    try:
        yield
    finally:
        hooks = client.event_hooks
        client.event_hooks = {**hooks, "request": [h for h in hooks["request"] if h is not hook]}
