"""A ``k`` of the wrong type is refused by the client's pre-flight as bad params (§7.7),
before the ``maxK`` clamp (§4.7) could trip over it."""

from __future__ import annotations

import pytest

from rcpkit.client.memory import connect_memory
from rcpkit.protocol.errors import InvalidParams, UsageError
from rcpkit.server.example import build_server


@pytest.mark.parametrize("k", ["ten", 2.5, None])
async def test_mistyped_k_is_a_usage_error_naming_the_field(k: object) -> None:
    async with await connect_memory(build_server()) as client:
        assert client.capabilities.retrieve is not None and client.capabilities.retrieve.max_k
        with pytest.raises(UsageError, match="k") as refused:
            await client.retrieve("json", k)
        assert isinstance(refused.value.__cause__, InvalidParams)
        assert refused.value.__cause__.data == {"field": "k"}
