"""Check frames against the normative RCP/1 JSON Schema (rcp-spec/schema/rcp-1.0.json).

When the schema file is absent every check is skipped cleanly: :func:`assert_frame`
and :func:`assert_result` become no-ops, and tests marked :data:`requires_schema`
are skipped. Set ``RCP_SCHEMA`` to point at another copy of the file.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SCHEMA_PATH", "assert_frame", "assert_result", "requires_schema", "schema_available"]

SCHEMA_PATH = Path(os.environ.get(
    "RCP_SCHEMA", Path(__file__).resolve().parents[3] / "shared/rcp-spec/schema/rcp-1.0.json"))


def schema_available() -> bool:
    return SCHEMA_PATH.is_file()


requires_schema = pytest.mark.skipif(not schema_available(),
                                     reason=f"RCP schema not found at {SCHEMA_PATH}")


@functools.cache
def _validators() -> tuple[Any, Any] | None:
    if not schema_available():
        return None
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    frame = cls(schema)
    result_for = cls({"$ref": "#/$defs/ResultFor", "$defs": schema["$defs"]})
    return frame, result_for


def assert_frame(frame: Any) -> None:
    """Fail unless ``frame`` (decoded JSON: message or batch) is a valid RCP/1 frame."""
    validators = _validators()
    if validators is not None:
        _check(validators[0], frame, frame)


def assert_result(method: str, result: Any) -> None:
    """Fail unless ``result`` has the §7 shape of ``method``'s result."""
    validators = _validators()
    if validators is not None:
        _check(validators[1], {"method": method, "result": result}, result)


def _check(validator: Any, instance: Any, shown: Any) -> None:
    """Validate, failing with one short line (the full schema dump is unreadable)."""
    import jsonschema

    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise AssertionError(f"not a valid RCP/1 frame: {error.message} at '{where}': "
                             f"{json.dumps(shown)[:500]}")
