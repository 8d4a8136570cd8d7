"""Check frames against the normative RCP/1 JSON Schema (``rcp-spec/schema/rcp-1.0.json``).

The schema is found through one path, :data:`SCHEMA_PATH`: ``$RCP_SCHEMA`` when set,
else ``../shared/rcp-spec/schema/rcp-1.0.json`` next to the repository. When it is
absent, schema checks cannot run. Under CI (``CI=true``) that is a failure, never a
silent pass: :func:`assert_frame` and :func:`assert_result` raise, and
:func:`load_schema`, :func:`schema_cli_args` and tests marked :data:`requires_schema`
fail. Elsewhere (a bare clone) those tests are skipped with the reason shown, the
frame checks do nothing and ``rcpkit check`` runs without ``--schema``; the session
header says which case applies.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest

__all__ = ["IN_CI", "SCHEMA_PATH", "assert_frame", "assert_result", "load_schema",
           "requires_schema", "schema_available", "schema_cli_args", "schema_status"]

REPOSITORY = Path(__file__).resolve().parents[2]
SCHEMA_PATH = Path(os.environ.get(
    "RCP_SCHEMA", REPOSITORY.parent / "shared" / "rcp-spec" / "schema" / "rcp-1.0.json"))
IN_CI = os.environ.get("CI", "").lower() == "true"
_MISSING = f"the RCP/1 schema is not at {SCHEMA_PATH} (set RCP_SCHEMA to its path)"


def schema_available() -> bool:
    return SCHEMA_PATH.is_file()


def schema_status() -> str:
    """One line for the test session header."""
    if schema_available():
        return f"RCP schema: {SCHEMA_PATH}"
    consequence = "schema checks fail (CI=true)" if IN_CI else "schema checks are skipped"
    return f"RCP schema: MISSING at {SCHEMA_PATH}; {consequence}"


def _absent() -> None:
    """Without the schema: fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(_MISSING, pytrace=False)
    pytest.skip(_MISSING)


requires_schema = pytest.mark.skipif(not schema_available() and not IN_CI, reason=_MISSING)
"""Skip outside CI when the schema is absent; under CI the test runs, and its checks fail."""


@functools.cache
def _load() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text())
    return schema


def load_schema() -> dict[str, Any]:
    """The parsed schema (skips, or fails under CI, when it is absent)."""
    if not schema_available():
        _absent()
    return _load()


def schema_cli_args() -> list[str]:
    """``["--schema", path]`` for ``rcpkit check``; without the schema the check still runs
    its other checks (``[]``), except under CI, where the test fails."""
    if schema_available():
        return ["--schema", str(SCHEMA_PATH)]
    if IN_CI:
        pytest.fail(_MISSING, pytrace=False)
    return []


@functools.cache
def _validators() -> tuple[Any, Any] | None:
    if not schema_available():
        if IN_CI:
            raise AssertionError(_MISSING)
        return None
    import jsonschema

    schema = _load()
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
