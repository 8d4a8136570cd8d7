"""``embed`` (§7.3), ``embed/multi`` (§7.5) and ``embed/sparse`` (§7.4, when the bundled
WordPiece vocabulary is installed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rcpkit.binding.convert import reply
from rcpkit.binding.errors import answering
from rcpkit.engine.core import Engine
from rcpkit.engine.models.sparse import SparseEncoder
from rcpkit.protocol.content import ContentBlock, plain_text
from rcpkit.protocol.errors import InvalidParams
from rcpkit.protocol.types import (
    EmbedParams,
    EmbedResult,
    MultiEmbedParams,
    MultiEmbedResult,
    SparseEmbedParams,
    SparseEmbedResult,
    SparseVector,
)
from rcpkit.protocol.vectors import encode_vectors
from rcpkit.server import Context, Server

__all__ = ["register", "texts"]


def texts(inputs: Sequence[str | ContentBlock], path: str) -> list[str]:
    """Bare strings or text Content blocks (§4.8; gating already refused other modalities)."""
    return [plain_text(item, f"{path}[{index}]") for index, item in enumerate(inputs)]


def register(server: Server, engine: Engine, sparse: SparseEncoder | None) -> None:
    def embed(params: EmbedParams, ctx: Context) -> dict[str, Any]:
        encoding = params.encoding or "json"
        vectors = engine.embed(texts(params.inputs, "inputs"), params.kind or "document")
        return reply(EmbedResult(vectors=list(encode_vectors(vectors, encoding)),
                                 encoding=encoding, dimension=int(vectors.shape[1])))

    def embed_multi(params: MultiEmbedParams, ctx: Context) -> dict[str, Any]:
        encoding = params.encoding or "json"
        matrices = engine.token_embeddings(texts(params.inputs, "inputs"),
                                           params.kind or "document")
        return reply(MultiEmbedResult(
            matrices=[list(encode_vectors(matrix, encoding)) for matrix in matrices],
            encoding=encoding, dimension=engine.describe().embed_dimension))

    server.add_method("embed", answering(embed))
    server.add_method("embed/multi", answering(embed_multi))
    if sparse is None:
        return
    encoder = sparse

    def embed_sparse(params: SparseEmbedParams, ctx: Context) -> dict[str, Any]:
        inputs = texts(params.inputs, "inputs")
        limit = engine.describe().max_batch_inputs
        if len(inputs) > limit:
            raise InvalidParams(f"at most {limit} inputs per call", field="inputs")
        encoded = encoder.encode(inputs, params.kind or "document")
        return reply(SparseEmbedResult(sparse=[
            SparseVector(indices=indices.tolist(), values=values.tolist())
            for indices, values in encoded]))

    server.add_method("embed/sparse", answering(embed_sparse))
