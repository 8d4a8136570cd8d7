"""Text analysis for lexical retrieval (the ``sparse`` mode of §7.7) and token counting (§7.7.2).

The analyzer turns text into index terms:

1. NFKC normalisation, then Unicode case folding (``"Straße"`` → ``"strasse"``);
2. words are maximal runs of Unicode letters and digits, with inner apostrophes kept
   (``"don't"``); accents survive (``"hållbarhet"`` stays ``"hållbarhet"``);
3. runs of Chinese/Japanese characters (Han, Hiragana, Katakana) carry no spaces, so each run
   becomes its overlapping character bigrams (a one-character run stays a unigram);
4. stop words are dropped (the list below is English only);
5. Latin-script words are reduced with the Snowball stemmer of ``language`` (PyStemmer);
   other scripts are kept as they are.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Sequence

import Stemmer

__all__ = ["ENGLISH_STOPWORDS", "Analyzer", "count_tokens"]

# Written for this module: function words that carry no topical signal in English queries.
_ENGLISH_STOPWORD_LIST = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other ought our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t d ll m re ve don't doesn't didn't isn't aren't wasn't weren't won't wouldn't can't
    couldn't shouldn't i'm i've i'd i'll you're you've you'd you'll he's she's it's we're we've
    we'd we'll they're they've they'd they'll that's there's what's let's
"""
ENGLISH_STOPWORDS: frozenset[str] = frozenset(_ENGLISH_STOPWORD_LIST.split())

# PyStemmer's default cache holds 10k words, fewer than a real corpus vocabulary.
_STEM_CACHE_SIZE = 100_000
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_CJK_RUN = re.compile(f"[{_CJK}]+")
_CJK_CHAR = re.compile(f"[{_CJK}]")
# ASCII letters/digits, Latin-1 Supplement, Latin Extended-A/B, Latin Extended Additional.
_LATIN_WORD = re.compile(r"[0-9a-z'\u00c0-\u024f\u1e00-\u1eff]+")


class Analyzer:
    """Unicode-aware tokenizer with optional stop-word removal and Snowball stemming.

    ``language`` names a Snowball algorithm (``Stemmer.algorithms()``); stop words exist for
    English only, so ``stopwords=True`` removes nothing for other languages.
    """

    def __init__(self, language: str = "english", stopwords: bool = True, stem: bool = True):
        if language not in Stemmer.algorithms():
            raise ValueError(f"no Snowball stemmer for language {language!r}")
        self.language = language
        self.stopwords = stopwords
        self.stem = stem
        self._stop = ENGLISH_STOPWORDS if stopwords and language == "english" else frozenset()
        self._per_thread = threading.local()  # a PyStemmer object must not be shared by threads

    def tokens(self, text: str) -> list[str]:
        """Index terms of ``text`` in document order (repeats kept); ``[]`` for blank text."""
        folded = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
        words = _WORD.findall(folded)
        if _CJK_CHAR.search(folded) is not None:
            words = [part for word in words for part in _split_cjk(word)]
        if self._stop:
            words = [w for w in words if w not in self._stop]
        if not self.stem:
            return words
        if folded.isascii():
            stems: list[str] = self._stemmer().stemWords(words)
            return stems
        latin = [i for i, w in enumerate(words) if _LATIN_WORD.fullmatch(w)]
        stems = self._stemmer().stemWords([words[i] for i in latin])
        for i, stem in zip(latin, stems, strict=True):
            words[i] = stem
        return words

    def tokens_batch(self, texts: Sequence[str]) -> list[list[str]]:
        """:meth:`tokens` of each text, in order."""
        return [self.tokens(text) for text in texts]

    def _stemmer(self) -> Stemmer.Stemmer:
        stemmer: Stemmer.Stemmer | None = getattr(self._per_thread, "stemmer", None)
        if stemmer is None:
            stemmer = self._per_thread.stemmer = Stemmer.Stemmer(self.language, _STEM_CACHE_SIZE)
        return stemmer


def _split_cjk(word: str) -> list[str]:
    """Split a word into its non-CJK parts and the character bigrams of its CJK runs."""
    if _CJK_CHAR.search(word) is None:
        return [word]
    parts: list[str] = []
    position = 0
    for run in _CJK_RUN.finditer(word):
        if run.start() > position:
            parts.append(word[position : run.start()])
        chars = run.group()
        if len(chars) == 1:
            parts.append(chars)
        else:
            parts.extend(chars[i : i + 2] for i in range(len(chars) - 1))
        position = run.end()
    if position < len(word):
        parts.append(word[position:])
    return [part.strip("'") for part in parts if part.strip("'")]


def count_tokens(text: str) -> int:
    """Approximate LLM token count of ``text``, used to pack hits into a §7.7.2 ``tokenBudget``.

    Rule: each Chinese/Japanese character counts as one token; the rest of the text counts
    ``ceil(max(chars / 4, words * 4 / 3))`` — the two usual rules of thumb for English BPE
    vocabularies, taking the larger so that packing errs on the side of staying under budget.
    """
    text = text.strip()
    cjk = len(_CJK_CHAR.findall(text))
    chars = len(text) - cjk
    words = len(_CJK_RUN.sub(" ", text).split())
    return cjk + math.ceil(max(chars / 4, words * 4 / 3))
