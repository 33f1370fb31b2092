"""Queue messages as JSON. Huey pickles its messages by default, so anyone who can write the queue (the
Redis server, the SQLite file) would run code in every worker that reads it; a JSON message can only
ever be data. A message that does not decode raises `UndecodableMessage`: huey's consumer logs it
and goes on with the next one (and so does `JobQueue.drain`)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from huey.registry import Message
from huey.serializer import Serializer

_DATETIME, _MESSAGE = "__datetime__", "__message__"


class UndecodableMessage(ValueError):
    """Queue data that is not one of our JSON messages (an old pickle, garbage, tampering)."""


def _encode(value: Any) -> Any:
    if isinstance(value, Message):
        return {_MESSAGE: {name: _encode(getattr(value, name)) for name in Message._fields}}
    if isinstance(value, datetime.datetime):
        return {_DATETIME: value.isoformat()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"a queue message cannot carry a {type(value).__name__}")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_DATETIME}:
            return datetime.datetime.fromisoformat(value[_DATETIME])
        if set(value) == {_MESSAGE}:
            return _message(value[_MESSAGE])
        return {k: _decode(v) for k, v in value.items()}
    return value


def _message(fields: Any) -> Message:
    if not isinstance(fields, dict) or not isinstance(fields.get("name"), str) or set(fields) - set(Message._fields):
        raise UndecodableMessage("not a task message")
    decoded = {name: _decode(value) for name, value in fields.items()}
    decoded["args"] = tuple(decoded.get("args") or ())
    decoded["kwargs"] = decoded.get("kwargs") or {}
    if not isinstance(decoded["kwargs"], dict):
        raise UndecodableMessage("task kwargs are not a table")
    return Message(**decoded)


class JsonSerializer(Serializer):
    def _serialize(self, data: Any) -> bytes:
        return json.dumps(_encode(data), separators=(",", ":")).encode("utf-8")

    def _deserialize(self, data: bytes) -> Any:
        try:
            obj = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise UndecodableMessage(f"queue data is not JSON ({len(data)} bytes); skipped") from None
        try:
            return _decode(obj) if not (isinstance(obj, dict) and set(obj) == {_MESSAGE}) else _message(obj[_MESSAGE])
        except (TypeError, ValueError) as exc:
            raise UndecodableMessage(f"queue data is not a task message ({exc}); skipped") from None
