"""Sparse text vectors for ``embed/sparse`` (§7.4) over the MiniLM WordPiece vocabulary.

These are *lexical* term weights, not learned SPLADE weights: a text's WordPiece tokens are
counted, and each distinct token id gets ``log(1 + tf)``. Special tokens, punctuation-only
tokens and a short English stop list are dropped. Ids are the vocabulary ids of the bundled
all-MiniLM-L6-v2 ``tokenizer.json`` (BERT uncased, 30 522 entries), so they are stable across
processes and versions of rcpkit. No expansion terms are produced: a text only ever activates
tokens it contains.
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rcpkit.engine.errors import Unavailable
from rcpkit.engine.models.embedding import check_kind, minilm_files

if TYPE_CHECKING:
    import tokenizers

__all__ = ["STOPWORDS", "SparseEncoder"]

STOPWORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "from", "has", "have", "he",
    "her", "his", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no", "nor", "not",
    "of", "on", "or", "our", "she", "so", "such", "than", "that", "the", "their", "them", "then",
    "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which",
    "who", "will", "with", "you", "your",
})
"""Common English function words, removed because they carry no lexical evidence."""


class SparseEncoder:
    """Log-tf WordPiece weights (see module docstring); ``kind`` does not change the weights."""

    def __init__(
        self,
        tokenizer_path: str | Path | None = None,
        *,
        identity: str = "rcpkit/wordpiece-logtf@1:all-MiniLM-L6-v2",
        stopwords: frozenset[str] = STOPWORDS,
    ) -> None:
        self.tokenizer_path = Path(tokenizer_path) if tokenizer_path else minilm_files()[1]
        self.identity = identity
        self.stopwords = stopwords
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._ignored: np.ndarray = np.zeros(0, dtype=bool)
        self._lock = threading.Lock()

    @property
    def vocabulary(self) -> int:
        """Number of vocabulary ids; every index is below it."""
        return len(self._load()[1])

    def encode(
        self, texts: Sequence[str], kind: str = "document"
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per text ``(indices int64 ascending, values float32 > 0)`` (§7.4)."""
        check_kind(kind)
        tokenizer, ignored = self._load()
        vectors = []
        for encoding in tokenizer.encode_batch(list(texts), add_special_tokens=False):
            ids = np.asarray(encoding.ids, dtype=np.int64)
            ids = ids[~ignored[ids]]
            indices, counts = np.unique(ids, return_counts=True)
            vectors.append((indices, np.log1p(counts).astype(np.float32)))
        return vectors

    def _load(self) -> tuple[tokenizers.Tokenizer, np.ndarray]:
        """The tokenizer (no truncation) and a mask of ids that never carry weight."""
        with self._lock:
            if self._tokenizer is None:
                if not self.tokenizer_path.is_file():
                    raise Unavailable(f"tokenizer file missing: {self.tokenizer_path}")
                import tokenizers

                try:
                    tokenizer = tokenizers.Tokenizer.from_file(str(self.tokenizer_path))
                except Exception as exc:  # tokenizers raises its own untyped errors
                    raise Unavailable(
                        f"cannot load tokenizer {self.tokenizer_path}"
                    ) from exc
                tokenizer.no_truncation()
                tokenizer.no_padding()
                vocabulary = tokenizer.get_vocab(with_added_tokens=True)
                ignored = np.zeros(max(vocabulary.values()) + 1, dtype=bool)
                special = {token.content for token in tokenizer.get_added_tokens_decoder().values()}
                for token, token_id in vocabulary.items():
                    ignored[token_id] = (
                        token in special or token in self.stopwords or _is_punctuation(token)
                    )
                self._tokenizer, self._ignored = tokenizer, ignored
            return self._tokenizer, self._ignored


def _is_punctuation(token: str) -> bool:
    """True for tokens made only of punctuation/symbol characters (``.``, ``##!``, ``--``)."""
    text = token.removeprefix("##")
    return bool(text) and all(unicodedata.category(char)[0] in "PS" for char in text)
