"""Text normal forms for curation: the problem text kept for training, the answer, and the word tokens and
n-grams that duplicate detection and decontamination compare.

Covers three jobs, standard library only:

* :func:`normalize_problem`: the problem text written to the curated set (whitespace only: the model still
  reads the LaTeX);
* :func:`normalize_answer`: the reference answer (delimiters, ``\\boxed{}``, ``\\text{}`` wrappers, thousands
  separators and units through :mod:`tirl.reward.normalize`, so curation and the verifier agree);
* :func:`word_tokens` and :func:`ngram_hashes`: the comparison form. Lower case; LaTeX spacing commands
  (``\\,``, ``\\;``, ``\\!``, ``\\quad``, ``~``), sizing and font wrappers (``\\left``, ``\\displaystyle``,
  ``\\text``, ``\\mathrm``) and thousands separators inside numbers are removed; ``\\dfrac``/``\\tfrac`` are
  ``frac``; punctuation is dropped; the tokens are runs of letters, runs of digits, the operators
  ``+ - * / = < > ^`` and the brackets ``( ) [ ]`` (so ``2+3`` and ``2-3``, ``88 \\div 4 \\div 2`` and
  ``88 \\div (4 \\div 2)`` stay different). A copy with changed spacing, spacing commands
  or punctuation has the same tokens.

It does not decide what is a duplicate or a contaminated problem (:mod:`tirl.data.curation.dedup`,
:mod:`tirl.data.curation.decontam`).
"""

from __future__ import annotations

import re
import unicodedata

from tirl.reward.normalize import canonical_integer, normalize_text

_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u202f\u205f\u3000]+")
_MANY_NEWLINES = re.compile(r"\n{3,}")
_LATEX_SPACING = re.compile(r"\\[,;:! ]|\\(?:q?quad|enspace|thinspace|medspace|thickspace|negthinspace)(?![A-Za-z])|~")
_LATEX_WRAPPERS = re.compile(
    r"\\(?:left|right|bigl|bigr|Bigl|Bigr|big|Big|displaystyle|textstyle|text|textbf|textit|textrm|mathrm|mathbf"
    r"|mathit|mbox|operatorname|rm|bf|it)(?![A-Za-z])"
)
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![A-Za-z])")
_THOUSANDS = re.compile(r"(?<=\d)(?:,|\{,\}|\\,)(?=\d{3}(?!\d))")
_WORD_HYPHEN = re.compile(r"(?<=[^\W\d_])-(?=[^\W\d_])")
_TOKEN = re.compile(r"\d+|[^\W\d_]+|[+\-*/=<>^()\[\]]")


def normalize_problem(text: str) -> str:
    """The problem text as the curated set stores it: Unicode NFC, ``\\r\\n`` as ``\\n``, runs of spaces and
    tabs (also no-break and thin spaces) as one space, no trailing spaces, at most one blank line in a row,
    stripped. LaTeX and wording are kept. Never raises on a string."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _MANY_NEWLINES.sub("\n\n", "\n".join(lines)).strip()


def normalize_answer(answer: str) -> str:
    """The reference answer in its normal form.

    An answer that reads as an integer under the verifier's policy (:func:`tirl.reward.normalize.canonical_integer`:
    ``$1{,}000$``, ``\\boxed{42}``, ``\\$18``, ``35 cm``, ``x = 5``) becomes its canonical digits (``-`` then
    digits, no leading zeros); anything else gets the verifier's conservative text normal form
    (:func:`tirl.reward.normalize.normalize_text`: delimiters, boxes and ``\\text{}`` unwrapped, ``\\dfrac`` as
    ``\\frac``, spaces next to symbols removed). Never raises on a string.
    """
    integer = canonical_integer(answer)
    if integer is not None:
        return integer
    return normalize_text(answer) or ""


def word_tokens(text: str) -> list[str]:
    """The comparison tokens of ``text`` (see the module docstring): lower-case letter runs, digit runs, the
    operators ``+ - * / = < > ^`` and brackets ``( ) [ ]``, after removing LaTeX spacing, wrappers and thousands
    separators.

    ``"Find $1{,}000\\,\\cdot\\; x$!"`` and ``"find 1000 cdot x"`` give the same tokens. Never raises.
    """
    text = unicodedata.normalize("NFKC", text)
    text = _THOUSANDS.sub("", text)
    text = _LATEX_SPACING.sub(" ", text)
    text = _LATEX_WRAPPERS.sub(" ", text)
    text = _FRAC_VARIANTS.sub(r"\\frac", text)
    text = _WORD_HYPHEN.sub(" ", text)
    return _TOKEN.findall(text.lower())


def words_only(tokens: list[str]) -> list[str]:
    """``tokens`` without the operator and bracket tokens: the letter and digit runs that decontamination compares (the
    report's "word" n-grams; with operators, ``1 + 2 + 3 + 4 +`` or Asymptote's ``a - - b - - c`` would be
    8-grams shared by many unrelated problems)."""
    return [t for t in tokens if t[0].isalnum()]


def ngram_hashes(tokens: list[str], n: int) -> set[int]:
    """The hashes of the word ``n``-grams of ``tokens`` (contiguous runs of ``n`` tokens).

    A text with fewer than ``n`` tokens has one gram, all its tokens; an empty text has none. Hashes are
    Python's ``hash`` of the token tuple: equal within one process, so compare sets made by one run only.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if len(tokens) < n:
        return {hash(tuple(tokens))} if tokens else set()
    return {hash(tuple(tokens[i : i + n])) for i in range(len(tokens) - n + 1)}


def ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    """The word ``n``-grams of ``tokens`` in order (for showing a match); fewer than ``n`` tokens: one gram."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if len(tokens) < n:
        return [tuple(tokens)] if tokens else []
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
