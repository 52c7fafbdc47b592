"""Checking a tool call's arguments against the tool's JSON schema, on every call, cheaply.

A jsonschema validator costs more to build than a call costs to validate, so one is built per schema
object and kept (those of the 1,024 schemas used last); ``@tool``'s schemas for scalar arguments also get a quick check of a few dict
lookups, which accepts most calls without jsonschema.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import jsonschema
from cachetools import LRUCache, cached

QuickCheck = Callable[[Any], bool]


def argument_problems(schema: dict[str, Any], arguments: Any) -> str | None:
    """Every way ``arguments`` breaks ``schema``, each naming its argument; ``None`` if valid."""
    _, validator, quick = _checks(schema)
    if quick is not None and quick(arguments):
        return None
    errors = sorted(validator.iter_errors(arguments), key=jsonschema.exceptions.relevance)
    if not errors:
        return None
    parts = []
    for error in errors:
        path = ".".join(str(p) for p in error.absolute_path)
        parts.append(f"argument {path!r}: {error.message}" if path else error.message)
    return "; ".join(parts)


@cached(LRUCache(maxsize=1024), key=id, lock=threading.Lock())
def _checks(schema: dict[str, Any]) -> tuple[dict[str, Any], Any, QuickCheck | None]:
    """The schema's validator and quick check, kept by the schema's ``id`` (a dict is not hashable);
    the entry holds the schema, so no other object has that id while the entry is kept."""
    return schema, jsonschema.validators.validator_for(schema)(schema), quick_check(schema)


_QUICK_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}
"""The exact Python types a quick check accepts for each JSON type (anything else, ``1.0`` for an
integer or a ``str`` subclass, is left to jsonschema)."""
_QUICK_OBJECT_KEYS = {"type", "properties", "required", "additionalProperties", "title", "description"}
_QUICK_PROPERTY_KEYS = {"type", "default", "title", "description"}


def quick_check(schema: dict[str, Any]) -> QuickCheck | None:
    """For the schema ``@tool`` writes for scalar arguments (an object of typed properties, some
    required, maybe no others), a check that says True only of arguments jsonschema accepts, in a
    few dict lookups; ``None`` for any other schema. A False goes to jsonschema, which finds the errors."""
    if set(schema) - _QUICK_OBJECT_KEYS or schema.get("type") != "object":
        return None
    properties, required = schema.get("properties", {}), schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or not isinstance(closed, bool):
        return None
    types: dict[str, tuple[type, ...]] = {}
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if not isinstance(kind, str) or kind not in _QUICK_TYPES or set(prop) - _QUICK_PROPERTY_KEYS:
            return None
        types[name] = _QUICK_TYPES[kind]
    need = tuple(required)

    def check(arguments: Any) -> bool:
        if type(arguments) is not dict:
            return False
        for name in need:  # a loop, not all() over a generator: this runs on every call
            if name not in arguments:
                return False
        for name, value in arguments.items():
            allowed = types.get(name)
            if allowed is None:
                if closed is False:
                    return False
            elif type(value) not in allowed:
                return False
        return True

    return check
