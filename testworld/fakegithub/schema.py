"""Just enough JSON Schema (OpenAPI 3.0 dialect) to check the fake against GitHub's description.

`jsonschema` is not a dependency of the project, and GitHub's dereferenced
description only uses a handful of keywords, so a small validator keeps the
contract test honest without adding a package.  Unknown keywords (``format``,
``description``, ``example``...) are ignored, exactly as a validator would for
annotations.  OpenAPI 3.0's ``nullable`` is honoured because GitHub relies on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _has_type(value: object, name: str) -> bool:
    # bool is an int in Python but never a number in JSON.
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _JSON_TYPES.get(name, (object,)))


def validate(value: object, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Return every violation found; an empty list means the value conforms.

    Collecting all errors instead of stopping at the first one makes a failing
    contract test show the whole shape mismatch at once.
    """
    if value is None and schema.get("nullable") is True:
        return []
    errors: list[str] = []
    expected = schema.get("type")
    if isinstance(expected, str) and not _has_type(value, expected):
        return [f"{path}: expected {expected}, got {type(value).__name__} {value!r:.60}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        errors += _validate_object(value, schema, path)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{index}]")
    for sub in schema.get("allOf", []):
        errors += validate(value, sub, path)
    if "anyOf" in schema and not any(not validate(value, sub, path) for sub in schema["anyOf"]):
        errors.append(f"{path}: matches none of anyOf")
    if "oneOf" in schema:
        matches = sum(1 for sub in schema["oneOf"] if not validate(value, sub, path))
        if matches != 1:
            errors.append(f"{path}: matches {matches} of oneOf, expected exactly 1")
    return errors


def _validate_object(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = [f"{path}: missing required {key!r}" for key in schema.get("required", []) if key not in value]
    properties: Mapping[str, Any] = schema.get("properties", {})
    additional = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            errors += validate(item, properties[key], f"{path}.{key}")
        elif additional is False:
            errors.append(f"{path}: unexpected property {key!r}")
        elif isinstance(additional, Mapping):
            errors += validate(item, additional, f"{path}.{key}")
    return errors
