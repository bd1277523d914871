"""Text normalisation of answers for the in-process fast paths (no sympy, standard library only).

Covers three small jobs:

* :func:`canonical_integer`: read an answer as an integer under the documented policy below, returning its
  canonical digits (never converting to ``int``, so Python's 4300-digit conversion limit cannot bite);
* :func:`normalize_text`: a conservative text normal form; two answers with the same normal form are equal;
* :func:`latex_for_math_verify`: the string handed to math-verify, with delimiters stripped and the content
  wrapped in ``\\boxed{}`` so it is read as LaTeX (a bare ``(1,2)`` or ``e^{16}-1`` is otherwise misread).

It does not decide non-textual equality; that is math-verify's job in a sandbox worker
(:mod:`tirl.reward.worker`).

Integer policy (``canonical_integer``), applied in this order:

1. math delimiters around the whole answer are removed (``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]``), and a
   ``\\boxed{..}`` that is the whole answer is unwrapped;
2. a trailing unit in a text command is dropped (``35\\text{ cm}``, ``7 \\mbox{dollars}``, ``3\\mathrm{kg}``),
   then ``\\text{..}``-like wrappers are unwrapped (``\\text{13}`` is 13); ``\\left``/``\\right`` are dropped;
   constants are never units: ``2\\mathrm{e}``, ``2\\text{ i}``, ``2\\mathrm{\\pi}`` and ``2 pi`` are not 2;
3. currency and percent signs are dropped (``\\$18``, ``$18``, ``10\\%``, ``10%``): a percent sign is given the
   benefit of the doubt against an integer reference, as math-verify does (``10\\%`` matches 10);
4. degree signs are dropped (``30^\\circ``, ``30^{\\circ}``, ``30°``, ``30\\degree``);
5. a trailing plain-text unit of two or more letters is dropped (``35 cm``, ``12 square feet``, ``5 cm^2``);
   single letters are not units (``5x`` is not 5), nor is ``pi``;
6. a single-variable assignment prefix is dropped (``x = 5``, ``n_1=5``), as is a final period;
7. a sign (``+``, ``-``, Unicode minus) and then the digits: thousands separators only in groups of three after a
   first group of one to three digits (``1,000``, ``1{,}000``, ``1\\,000``, ``1 000``, ``1,300,400``; so ``1,2``
   and ``(1,2)`` are *not* integers), a decimal point followed only by zeros (``5.0``, ``5.``), and leading zeros
   (``009`` is 9). ``-0`` is 0.

Anything else (``\\frac{10}{2}``, ``2^{10}``, ``5!``, ``1e3``) is not an integer here and goes to math-verify.

Two rules hold on every path: Unicode decimal digits and full-width forms read as their ASCII characters
(:func:`ascii_digits`: ``１２`` is 12), and words that withdraw or qualify an answer are never units
(:data:`HEDGE_WORDS`: ``2\\text{ or 3}``, ``5\\text{ is wrong}`` and ``2 or three`` are not integers; a text
holding a number, ``\\text{ or 3}``, is never a unit either), nor are number words, multipliers and operations
(:data:`NOT_UNIT_WORDS`, :data:`MULTIPLIER_WORDS`: ``2\\text{ million}``, ``2 hundred``,
``5\\text{ squared}``). Plain digits (sign, separators) are integers
at any length; the decoration rules run on the first ``MAX_DECORATED_CHARS`` characters only.
"""

from __future__ import annotations

import re
import unicodedata

#: A reference or answer longer than this that is not a plain integer is never sent to math-verify (parsing
#: and comparing it would end ``ok`` or ``timeout`` depending on the machine's load): a fixed rule decides it.
MAX_SYMBOLIC_CHARS = 10_000
# Longer answers are integers only as plain digits (sign, separators): the decoration rules (units, text
# commands, assignments) run on short strings only, which keeps every regex here linear in practice.
MAX_DECORATED_CHARS = 256

#: Words that withdraw, qualify or offer alternatives to an answer: never a unit, and in a box they make it
#: hedged (:func:`tirl.reward.forms.commitment_problem`). Lowercase; matched as whole words.
HEDGE_WORDS = frozenset(
    {
        "or",
        "possibly",
        "maybe",
        "perhaps",
        "probably",
        "likely",
        "either",
        "approximately",
        "approx",
        "roughly",
        "about",
        "around",
        "nearly",
        "almost",
        "guess",
        "unsure",
        "uncertain",
        "presumably",
        # modal words: "2 \\text{ (could be 3)}" keeps another value open (issue 41)
        "could",
        "might",
        "may",
    }
)
NEGATION_WORDS = frozenset({"not", "no", "isn't", "isnt", "wrong", "incorrect", "false", "never", "nor", "neither"})
#: Words that multiply the number before them (issue 41): never a unit. ``2 \\text{ million}`` is 2000000 and
#: ``3 \\text{ dozen}`` is 36 (:func:`tirl.reward.forms.read_answer`), never 2 or 3. Lowercase, with plurals.
MULTIPLIER_WORDS: dict[str, int] = {
    "hundred": 100,
    "thousand": 10**3,
    "million": 10**6,
    "billion": 10**9,
    "trillion": 10**12,
    "quadrillion": 10**15,
    "dozen": 12,
    "gross": 144,
}
MULTIPLIER_WORDS.update({word + "s": value for word, value in list(MULTIPLIER_WORDS.items()) if word != "gross"})
#: Words that change or name a value (number words, fractions, operations, "and"): after a value they are never a
#: unit, and an answer ending with them is no single value (issue 41: ``2 \\text{ squared}``, ``2 \\text{ and a
#: half}``, ``2 \\text{ reciprocal}`` scored as 2). Lowercase; matched as whole words.
NOT_UNIT_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen
    seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
    half halves third thirds quarter quarters fourth fourths fifth fifths sixth sixths seventh sevenths eighth
    eighths ninth ninths tenth tenths hundredth hundredths thousandth thousandths millionth millionths
    once twice thrice double doubled triple tripled halved
    squared cubed reciprocal reciprocals inverse inverses root roots sqrt power powers exponent
    factorial times plus minus over divided multiplied negated negative and than""".split()
)
_NOT_UNIT_PATTERN = re.compile(
    r"(?<![A-Za-z\\])(?:"
    + "|".join(sorted((re.escape(w) for w in NOT_UNIT_WORDS | set(MULTIPLIER_WORDS)), key=len, reverse=True))
    + r")(?![A-Za-z])",
    re.IGNORECASE,
)
HEDGE_PATTERN = re.compile(
    r"(?<![A-Za-z\\])(?:"
    + "|".join(sorted((re.escape(w) for w in HEDGE_WORDS | NEGATION_WORDS), key=len, reverse=True))
    + r")(?![A-Za-z])",
    re.IGNORECASE,
)
# Full-width ASCII forms (U+FF01..U+FF5E) and the ideographic space; NFKC maps them to ASCII.
_FULL_WIDTH = re.compile("[\uff01-\uff5e\u3000]")
_NON_ASCII_DIGIT = re.compile(r"[^\x00-\x7f]")
_DIGIT = re.compile(r"\d")
_UNIT_EXPONENT = re.compile(r"\^\s*\{?\s*[23]\s*\}?")


def ascii_digits(text: str) -> str:
    """``text`` with Unicode decimal digits (``１``, ``٣``) as ASCII digits and full-width forms (``＋``, ``，``)
    as ASCII (their NFKC form). Other characters are kept: NFKC of the whole text would make ``5²`` "52" and
    ``½`` "1⁄2". Returns ``text`` itself when it is ASCII (the common case, one C call)."""
    if text.isascii():
        return text
    text = _FULL_WIDTH.sub(lambda m: unicodedata.normalize("NFKC", m.group(0)), text)
    return _NON_ASCII_DIGIT.sub(
        lambda m: str(unicodedata.decimal(m.group(0))) if m.group(0).isdecimal() else m.group(0), text
    )


def names_hedge(text: str) -> bool:
    """True when ``text`` holds a word of :data:`HEDGE_WORDS`, :data:`NEGATION_WORDS`, :data:`NOT_UNIT_WORDS` or
    :data:`MULTIPLIER_WORDS` (or a digit, which a unit never holds): such a trailing text is never dropped as a
    unit."""
    if HEDGE_PATTERN.search(text) or _NOT_UNIT_PATTERN.search(text):
        return True
    return bool(_DIGIT.search(_UNIT_EXPONENT.sub("", text) if "^" in text else text))


_DELIMITERS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_TEXT_COMMANDS = r"(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|hbox)"
_TEXT_GROUP = re.compile(r"\\" + _TEXT_COMMANDS + r"\s*\{([^{}]*)\}")
# Constants are values, never units: e, i and pi in any spelling (``2\\mathrm{e}`` is not 2).
_CONSTANT_WORD = r"(?:e|i|pi|\\pi)"
_TRAILING_TEXT_UNIT = re.compile(
    r"(?<=[0-9.}])\s*\\" + _TEXT_COMMANDS + r"\s*\{(?!\s*" + _CONSTANT_WORD + r"\s*\})\s*[A-Za-z][A-Za-z .]*"
    r"(?:\^\s*\{?[23]\}?)?\s*\}\s*$"
)
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])\s*")
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad(?![A-Za-z])|~|[\u2009\u202f\u00a0]")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|\\circ(?![A-Za-z])|°|\\degree(?![A-Za-z])")
_CURRENCY = re.compile(r"\\\$|\$|\\textdollar(?![A-Za-z])")
_PERCENT = re.compile(r"\\%|%")
_PLAIN_UNIT = re.compile(r"(?<=[0-9.])\s*(?!pi\b)[A-Za-z]{2,}(?:\s+[A-Za-z]{2,})*(?:\s*\^\s*\{?[23]\}?)?\s*$")
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*")
_SIGN = re.compile(r"^([+\-\u2212])\s*")
_PLAIN_DIGITS = re.compile(r"^(\d+)(?:\.0*)?$")
_GROUPED_DIGITS = re.compile(r"^(\d{1,3}(?:([, ])\d{3})(?:\2\d{3})*)(?:\.0*)?$")
_BOXED_WHOLE = re.compile(r"^\\(?:boxed|fbox)\s*\{")


def _strip_outer(text: str) -> str:
    """Remove whitespace and math delimiters that enclose the whole string (repeatedly).

    Works on indices and slices once: slicing at every layer made ``\\(`` nested 250,000 times (a 1 MiB
    answer) cost seconds, quadratic in the length.
    """
    start, end = 0, len(text)
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    changed = True
    while changed:
        changed = False
        for open_, close in _DELIMITERS:
            if (
                end - start >= len(open_) + len(close)
                and text.startswith(open_, start, end)
                and text.endswith(close, start, end)
            ):
                inner_start, inner_end = start + len(open_), end - len(close)
                # "$a$ and $b$" is not one math span: the delimiter must not reappear inside.
                if open_ == "$" and "$" in text[inner_start:inner_end].replace("\\$", ""):
                    continue
                start, end = inner_start, inner_end
                while start < end and text[start].isspace():
                    start += 1
                while end > start and text[end - 1].isspace():
                    end -= 1
                changed = True
                break
    return text[start:end]


def _matching_brace(text: str, open_pos: int) -> int:
    """Index of the brace closing the one at ``open_pos`` (escaped braces ignored), or -1."""
    depth = 0
    i = open_pos
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def strip_math_delimiters(text: str) -> str:
    """``text`` without enclosing math delimiters or an enclosing ``\\boxed{..}``/``\\fbox{..}``.

    ``"$\\boxed{42}$"`` gives ``"42"``; ``"$a$ and $b$"`` is left alone. Never raises on a string.
    """
    text = _strip_outer(text)
    for _ in range(4):
        match = _BOXED_WHOLE.match(text)
        if not match:
            break
        close = _matching_brace(text, match.end() - 1)
        if close != len(text) - 1:
            break
        text = _strip_outer(text[match.end() : close])
    return text


def _unwrap_text_commands(text: str) -> str:
    for _ in range(8):
        new = _TEXT_GROUP.sub(lambda m: m.group(1), text)
        if new == text:
            break
        text = new
    return text


def canonical_integer(answer: str | None) -> str | None:
    """The canonical form of ``answer`` read as an integer, or None when it is not one under the policy.

    Args:
        answer: an answer string (a box content, a reference answer), or None.

    Returns:
        Optional ``-`` then digits without leading zeros (``"009"`` -> ``"9"``, ``"-0"`` -> ``"0"``,
        ``"\\$1{,}000"`` -> ``"1000"``, ``"１２"`` -> ``"12"``); None for non-integers. Plain digits are
        read at any length (linear time). See the module docstring for the full policy. Never raises on a
        string.
    """
    if not isinstance(answer, str):
        return None
    text = strip_math_delimiters(answer if answer.isascii() else ascii_digits(answer))
    if len(text) > MAX_DECORATED_CHARS:
        return _plain_integer(text)
    text = _drop_unit(_TRAILING_TEXT_UNIT.search(text), text)
    text = _unwrap_text_commands(text)
    text = _LEFT_RIGHT.sub("", text)
    text = text.replace("{,}", ",")
    text = _SPACING.sub(" ", text)
    text = _CURRENCY.sub("", text)
    text = _PERCENT.sub("", text)
    text = _DEGREES.sub("", text)
    text = text.strip()
    text = _drop_unit(_PLAIN_UNIT.search(text), text)
    text = _ASSIGNMENT.sub("", text)
    text = text.strip()
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip()
    return _plain_integer(text)


def _drop_unit(match: re.Match[str] | None, text: str) -> str:
    """``text`` without the trailing unit ``match`` found, unless it is a hedge or negation (``\\text{ or 3}``,
    ``is wrong``) or holds a number."""
    if match is None or names_hedge(match.group(0)):
        return text
    return text[: match.start()]


def _plain_integer(text: str) -> str | None:
    """Rule 7 of the policy: sign, then digits with optional grouping and a zero fraction."""
    negative = False
    sign = _SIGN.match(text)
    if sign:
        negative = sign.group(1) != "+"
        text = text[sign.end() :]
    match = _PLAIN_DIGITS.match(text)
    if match:
        digits = match.group(1)
    else:
        grouped = _GROUPED_DIGITS.match(text)
        if not grouped:
            return None
        digits = grouped.group(1).replace(",", "").replace(" ", "")
    digits = digits.lstrip("0") or "0"
    if negative and digits != "0":
        return "-" + digits
    return digits


_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![A-Za-z])")
_SPACE_NEAR_SYMBOL = re.compile(r" (?=[^0-9A-Za-z])|(?<=[^0-9A-Za-z]) ")


def normalize_text(answer: str | None) -> str | None:
    """A conservative normal form: two answers with equal normal forms are the same answer.

    Strips enclosing delimiters and boxes, unwraps ``\\text{..}``-like commands, drops ``\\left``/``\\right``,
    maps ``\\dfrac``/``\\tfrac`` to ``\\frac``, removes a final period and whitespace next to a non-alphanumeric
    character (``x + 1`` -> ``x+1``; ``1\\,2`` stays ``1 2``, never ``12``). Case is kept. None for None.
    """
    if not isinstance(answer, str):
        return None
    text = strip_math_delimiters(answer if answer.isascii() else ascii_digits(answer))
    text = _unwrap_text_commands(text)
    text = _LEFT_RIGHT.sub("", text)
    text = _FRAC_VARIANTS.sub(r"\\frac", text)
    text = _SPACING.sub(" ", text)
    text = re.sub(r"\s+", " ", text).strip()
    text = _SPACE_NEAR_SYMBOL.sub("", text)
    if text.endswith(".") and not text.endswith(".."):
        text = text[:-1].rstrip()
    return text


def latex_for_math_verify(answer: str) -> str:
    """``answer`` as a LaTeX string math-verify reads as one expression: ``\\boxed{<content>}``.

    Enclosing delimiters and boxes are removed first, so ``"$\\frac{1}{2}$"``, ``"\\boxed{\\frac{1}{2}}"`` and
    ``"\\frac{1}{2}"`` all give ``"\\boxed{\\frac{1}{2}}"``. The reference answer and the extracted prediction
    both go through this (the verl convention of boxing the reference, field case F70).
    """
    return "\\boxed{" + strip_math_delimiters(answer) + "}"
