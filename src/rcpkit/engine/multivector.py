"""Sentence-aware dense vectors: a chunk is scored by its whole-text vector and its windows.

An encoder reads only its first ``max_tokens`` (256 for all-MiniLM-L6-v2), so a long chunk's
whole-text vector never sees its end. :func:`tail_windows` cuts the text the model did not
read into windows of whole sentences (each one model window long at most).
"""

from __future__ import annotations

from rcpkit.engine.chunking import sentence_spans

__all__ = ["tail_windows"]


def tail_windows(text: str, *, head_chars: int, window_chars: int) -> list[str]:
    """Whole-sentence windows of at most ``window_chars`` covering ``text`` from the first
    sentence that does not end within its first ``head_chars`` characters; ``[]`` when the
    whole text fits in the head."""
    if len(text) <= head_chars:
        return []
    windows: list[str] = []
    start = end = -1
    for sentence_start, sentence_end in sentence_spans(text, max_chars=window_chars):
        if sentence_end <= head_chars:
            continue
        if start < 0:
            start, end = sentence_start, sentence_end
        elif sentence_end - start <= window_chars:
            end = sentence_end
        else:
            windows.append(text[start:end])
            start, end = sentence_start, sentence_end
    if start >= 0:
        windows.append(text[start:end])
    return windows
