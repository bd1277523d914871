"""Reading answer forms before comparison: punctuation, constants, base numerals, mixed and separated numbers.

Covers :func:`read_answer`, which turns an answer string (a box content or a reference answer) into the text
the fast paths and math-verify compare, or says why the string is not one value. Standard library only: it
runs in the caller's process (before the fast paths) and again in the sandbox worker (before math-verify), and
reading an already read text changes nothing.

Policies, applied in this order (docs/reward.md, "Answer forms"):

1. **Trailing punctuation**: a final ``.``, ``;`` or ``,`` (also after spacing commands, and inside or
   outside enclosing ``$..$``) is dropped: ``\\frac{1}{\\sqrt{2}}.`` is ``\\frac{1}{\\sqrt{2}}``. An ellipsis
   (``1, 2, 3, ...``) and an escaped character (``\\;``, ``\\,``) are kept.
2. **Constants**: ``\\mathrm{e}``, ``\\operatorname{e}``, ``\\textrm{e}``, ``\\mathit{e}``, ``\\mathup{e}``,
   ``\\rm e`` are Euler's number ``e``; the same spellings of ``i`` are the imaginary unit ``i``;
   ``\\mathrm{\\pi}``, ``\\uppi``, ``\\mathrm{pi}`` and ``π`` are ``\\pi``; after a number, ``\\text{e}``,
   ``\\text{ i}`` and ``\\text{pi}`` are the constants too (math-verify would drop them as units).
   math-verify 0.9 cannot parse ``\\operatorname{e}`` and cuts ``\\frac{1}{\\mathrm{e}}`` short, so such
   references scored 0 for every answer.
3. **Subscript bases**: an answer that is one numeral with a base subscript (``123_8``, ``4210_{5}``,
   ``(1011)_2``, ``A3_{16}``; bases 2 to 36, at least one decimal digit) is its value, written in decimal
   (``123_8`` is ``83``): it is compared by value, never by its digits read as decimal. Digits that are not
   valid in the base (``129_8``) make the answer "not a number" (see 6). When the reference is written in
   base b and the *question* asks for the answer in base b (``"Express your answer in base 8"``, ``"base
   eight"``; :func:`question_base`), a bare numeral answer is read in base b too: ``123`` is ``123_8`` there,
   and ``83`` (the value in decimal, not what was asked) is not a base-8 numeral. Without the question (or
   when it names no base) a bare numeral is decimal: ``123`` is not ``123_8``.
4. **Logical connectives**: ``\\lor``/``\\vee`` are written ``\\text{ or }`` and ``\\land``/``\\wedge``
   ``\\text{ and }``, the words math-verify reads (it cannot parse ``x<2 \\lor x>3``); the worker joins the
   conditions into one solution set (docs/reward.md, "Solution sets").
5. **Mixed numbers** (the MATH-500 convention): a whole number then a proper fraction, separated by
   whitespace or a spacing command or written next to a ``\\frac`` (``1 1/4``, ``1\\frac{4}{5}``,
   ``-2\\,\\tfrac{1}{3}``), is whole + fraction with the sign on both: ``1 1/4`` is ``\\frac{5}{4}``,
   ``-1\\frac{1}{4}`` is ``-\\frac{5}{4}``. An improper fraction after a whole number (``2 3/2``) is not a
   mixed number (see 6).
6. **Separated numbers**: two or more numbers separated only by whitespace (``2 3``, ``1\\;5``, ``2 3/2``) are
   not one number and are never summed or multiplied; :attr:`Reading.problem` says so. A gold answer like that
   is ``unparsable_gold``; an answer like that scores 0. Digit groups of three (``1 000``) are the integer
   policy's thousands separators, not separate numbers.
7. **Repeating decimals** (issue 23): ``0.\\overline{3}``, ``0.1\\overline{6}``, ``1.\\overline{142857}``,
   ``0.\\bar{3}``, ``0.\\dot{3}`` and ``0.\\dot{1}4\\dot{2}`` (dots over the first and last repeating digit)
   are the exact fraction they denote (``\\frac{1}{3}``, ``\\frac{1}{6}``, ``\\frac{8}{7}``), anywhere in
   the text; a reference written so is no longer unparsable.
8. **Empty set**: ``\\varnothing``, ``\\O`` and ``∅`` are ``\\emptyset`` (math-verify reads only the last).
9. **Digits**: Unicode decimal digits and full-width forms are ASCII (``１２`` is 12;
   :func:`tirl.reward.normalize.ascii_digits`), on every path and in :func:`value_key`.

:func:`commitment_problem` says why a box holds no single committed answer (a hedge, a negation, alternatives
joined by "or"); the verifier grades such an answer 0 with status ``hedged``.

It does not decide equality (the fast paths and :mod:`tirl.reward.worker` do).
"""

from __future__ import annotations

import logging
import re
from fractions import Fraction
from typing import NamedTuple

from tirl.reward.normalize import (
    HEDGE_WORDS,
    MAX_DECORATED_CHARS,
    MULTIPLIER_WORDS,
    NEGATION_WORDS,
    NOT_UNIT_WORDS,
    ascii_digits,
    strip_math_delimiters,
)

#: Most digits a reading converts to a Python integer (mixed numbers, repeating decimals, base numerals): far
#: below Python's 4300-digit limit on integer-text conversion, which raised ``ValueError`` in grading (issue 41).
MAX_READ_DIGITS = 1000

_TRAILING_SPACING_COMMANDS = ("\\,", "\\;", "\\:", "\\!", "\\ ", "\\quad", "\\qquad", "~")
_CONSTANT_COMMANDS = r"(?:mathrm|operatorname|textrm|mathit|mathup|mathnormal)"
_CONSTANTS = (
    (re.compile(r"\\" + _CONSTANT_COMMANDS + r"\s*\{\s*(e|i)\s*\}"), r"\1"),
    (re.compile(r"\\rm\s+(e|i)(?![A-Za-z])"), r"\1"),
    (re.compile(r"\\" + _CONSTANT_COMMANDS + r"\s*\{\s*(?:\\pi|pi)\s*\}"), r"\\pi "),
    (re.compile(r"\\uppi(?![A-Za-z])|π"), r"\\pi "),
    # after a number, a text command holding only a constant's name is that constant, not a unit to drop
    (re.compile(r"(?<=[0-9}])\s*\\(?:text|mbox)\s*\{\s*(e|i)\s*\}"), r"\1"),
    (re.compile(r"(?<=[0-9}])\s*\\(?:text|mbox)\s*\{\s*pi\s*\}"), r"\\pi "),
)
_LOGICAL = (
    (re.compile(r"\\(?:lor|vee)(?![A-Za-z])"), r" \\text{ or } "),
    (re.compile(r"\\(?:land|wedge)(?![A-Za-z])"), r" \\text{ and } "),
)
_LOGICAL_HINTS = ("\\lor", "\\vee", "\\land", "\\wedge")
_CONSTANT_HINTS = ("\\math", "\\oper", "\\text", "\\rm", "\\uppi", "π")
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad(?![A-Za-z])|~|[\u2009\u202f\u00a0]")
_BASE_NUMERAL = re.compile(
    r"^\(?\s*(?:\\text(?:rm)?\s*\{\s*([0-9A-Za-z]+)\s*\}|\\mathrm\s*\{\s*([0-9A-Za-z]+)\s*\}|([0-9A-Za-z]+))\s*\)?"
    r"\s*_\s*(?:\{\s*\(?\s*(\d+)\s*\)?\s*\}|(\d+))$"
)
_BARE_NUMERAL = re.compile(r"^[0-9A-Za-z]+$")
_SIGNED = r"([+\-\u2212]?)\s*"
_MIXED_SLASH = re.compile(r"^" + _SIGNED + r"(\d+)\s+(\d+)\s*/\s*(\d+)$")
_MIXED_FRAC = re.compile(r"^" + _SIGNED + r"(\d+)\s*\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))$")
_NUMBER = r"[+\-\u2212]?\d+(?:\.\d+)?(?:\s*/\s*\d+)?"
_SEPARATED = re.compile(r"^" + _NUMBER + r"(?:\s+" + _NUMBER + r")+$")
_ASSIGNMENT = re.compile(r"^[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*=\s*(?=\S)")
_THOUSANDS = re.compile(r"^[+\-\u2212]?\d{1,3}(?: \d{3})+(?:\.\d+)?$")
_BASE_WORDS = {
    "two": 2,
    "binary": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "octal": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "hexadecimal": 16,
}
_QUESTION_BASE = re.compile(
    r"\bbase[\s$\\{(]*(\d+|" + "|".join(w for w in _BASE_WORDS if w not in ("binary", "octal", "hexadecimal")) + r")\b"
    r"|\b(binary|octal|hexadecimal)\b",
    re.IGNORECASE,
)


class Reading(NamedTuple):
    """An answer as the comparison sees it.

    Attributes:
        text: the text to compare (delimiters and trailing punctuation removed, constants, base numerals and
            mixed numbers rewritten).
        problem: None when ``text`` is one comparable answer; otherwise why it is not (``"numbers separated
            by whitespace are not one number"``, ``"129 is not a base-8 numeral"``).
        base: the base of a base-written numeral (``123_8``: 8), else None.
    """

    text: str
    problem: str | None = None
    base: int | None = None


def strip_trailing_punctuation(text: str) -> str:
    """``text`` without enclosing delimiters and a final ``.``/``;``/``,`` (repeatedly, also inside ``$..$``).

    An ellipsis (two or more dots) and a punctuation character escaped by a backslash (``\\;``) are kept.
    Repeated until nothing changes (texts over ``MAX_DECORATED_CHARS`` characters: once, to stay linear).
    Never raises on a string.
    """
    while True:
        before = text
        text = strip_math_delimiters(_strip_trailing_spacing(text))
        if not text.endswith(".."):  # an ellipsis stays
            stripped = text.rstrip(".;,")
            if stripped != text and _escapes_next(stripped):
                stripped = text[: len(stripped) + 1]  # "\\." is a command, not punctuation
            text = stripped
        # Every pass shrinks the text; long texts get one pass (nested forms would make this quadratic).
        if text == before or len(before) > MAX_DECORATED_CHARS:
            return text


def _escapes_next(text: str) -> bool:
    """True when ``text`` ends with an odd number of backslashes (they escape what followed)."""
    return (len(text) - len(text.rstrip("\\"))) % 2 == 1


def _strip_trailing_spacing(text: str) -> str:
    """``text`` without trailing whitespace and spacing commands (a loop, linear in what it removes)."""
    text = text.rstrip()
    if text.endswith("\\") and not text.endswith("\\\\"):  # "\\ " lost its space to rstrip
        text = text[:-1].rstrip()
    while text.endswith(_TRAILING_SPACING_COMMANDS):
        for command in _TRAILING_SPACING_COMMANDS:
            if text.endswith(command) and not text.endswith("\\" + command):
                text = text[: -len(command)].rstrip()
                break
        else:
            break
    return text


def question_base(question: str | None) -> int | None:
    """The base a question asks the answer in: the one base it names (``"in base 8"``, ``"base eight"``,
    ``"base $5$"``, ``"binary"``), base 10 not counted when another is named (``"from base 10 to base 8"``);
    None when it names none or several. The verifier uses it only when the reference is written in that base.
    """
    if (
        not isinstance(question, str)
        or "base" not in question.lower()
        and not re.search(r"binary|octal|hexadecimal", question, re.IGNORECASE)
    ):
        return None
    bases = set()
    for match in _QUESTION_BASE.finditer(question):
        word = (match.group(1) or match.group(2)).lower()
        if word.isdigit() and len(word) > 3:  # no base of 4 digits; int() of 4300 refuses
            continue
        bases.add(int(word) if word.isdigit() else _BASE_WORDS[word])
    if len(bases) > 1:
        bases.discard(10)
    return bases.pop() if len(bases) == 1 else None


def _base_value(digits: str, base: int) -> str | None:
    """``digits`` read in ``base`` as a decimal string, or None when they are not a numeral of that base."""
    if not 2 <= base <= 36 or not any(c.isdigit() for c in digits) or len(digits) > MAX_READ_DIGITS:
        return None
    try:
        return str(int(digits, base))
    except ValueError:
        return None


def read_answer(answer: str, question_base_: int | None = None) -> Reading:
    """Read ``answer`` under the policies of the module docstring.

    Args:
        answer: a box content or a reference answer.
        question_base_: read a bare numeral in this base (the question asks for it and the reference is
            written in it; see :func:`question_base`), or None. Digits invalid in that base are a problem.

    Returns:
        The :class:`Reading`. Never raises on a string; reading ``Reading.text`` again gives the same text.
    """
    if question_base_ is None and answer.isdigit() and answer.isascii():
        return Reading(answer)
    text = strip_trailing_punctuation(ascii_digits(answer))
    if "\\" in text or "∅" in text:
        if any(hint in text for hint in _REPEATING_HINTS):
            text = _REPEATING.sub(_repeating_fraction, text)
        if any(hint in text for hint in _EMPTY_HINTS):
            text = _EMPTY_SET.sub(r"\\emptyset ", text).strip()
    if any(hint in text for hint in _CONSTANT_HINTS):
        for pattern, replacement in _CONSTANTS:
            text = pattern.sub(replacement, text)
        text = text.strip()
    if any(hint in text for hint in _LOGICAL_HINTS):
        for pattern, replacement in _LOGICAL:
            text = pattern.sub(replacement, text)
        text = " ".join(text.split())
    if "_" in text:
        match = _BASE_NUMERAL.match(text)
        digits = (match.group(1) or match.group(2) or match.group(3)) if match else ""
        base_digits = (match.group(4) or match.group(5)) if match else ""
        base = int(base_digits) if 0 < len(base_digits) <= 3 else 0  # bases are 2 to 36; int() of 4300 refuses
        if match and (digits.isdigit() or base > 10):  # "2a_3" is 2 times a_3, not a numeral
            value = _base_value(digits, base)
            if value is not None:
                return Reading(value, base=base)
            if any(c.isdigit() for c in digits):
                return Reading(text, f"{digits} is not a base-{base} numeral", base=base)
    elif question_base_ is not None and question_base_ != 10 and _BARE_NUMERAL.match(text):
        value = _base_value(text, question_base_)
        if value is None:
            return Reading(text, f"{text} is not a base-{question_base_} numeral", base=question_base_)
        return Reading(value, base=question_base_)
    words = _trailing_words(text)
    if words is not None:
        return words
    if "\\" in text and _LAST_PART_RELATIONS.search(text):
        # math-verify reads "2 \\mid 3" and "2 \\to 3" as their last part, 3 (issue 41)
        return Reading(text, "a relation between values (\\mid, an arrow) is not one value")
    spaced = _SPACING.sub(" ", text) if ("\\" in text or "~" in text or not text.isascii()) else text
    if " " not in spaced and "frac" not in spaced:
        return Reading(text)
    assignment = _ASSIGNMENT.match(spaced)  # "x = 1 1/4" is x = 5/4
    prefix = assignment.group(0) if assignment else ""
    value = spaced[len(prefix) :]
    if "frac" in value:
        match = _MIXED_FRAC.match(value)
        if match:
            return _mixed(
                match.group(1),
                match.group(2),
                match.group(3) or match.group(4),
                match.group(5) or match.group(6),
                text,
                prefix,
            )
    elif " " in value:
        match = _MIXED_SLASH.match(value)
        if match:
            return _mixed(*match.groups(), text, prefix)
        if _SEPARATED.match(value) and not _THOUSANDS.match(value):
            return Reading(text, "numbers separated by whitespace are not one number")
    return Reading(text)


_TRAILING_TEXT = re.compile(
    r"^(?P<value>.*?[0-9}.)])\s*(?:\\(?:text|textrm|textnormal|textbf|textit|mbox|hbox|mathrm)\s*\{(?P<group>[^{}]*)\}"
    r"|(?P<plain>(?<![A-Za-z\\])[A-Za-z]{2,}(?:\s+[A-Za-z]+)*))\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$",
    re.DOTALL,
)
_LAST_PART_RELATIONS = re.compile(
    r"\\(?:mid|nmid|divides|to|rightarrow|Rightarrow|longrightarrow|Longrightarrow|implies|iff|Leftrightarrow"
    r"|leftrightarrow|mapsto|therefore|because)(?![A-Za-z])"
)
_PLAIN_NUMBER = re.compile(r"^([+\-\u2212]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?$")
_WORD = re.compile(r"[A-Za-z]+")


def trailing_text(text: str) -> tuple[str, str] | None:
    """``(value, words)`` when ``text`` is a value followed by words (a text command such as ``\\text{ million}``,
    or plain words of two letters or more, optionally with a ``^2``/``^3``), else None. Texts over
    ``MAX_DECORATED_CHARS`` are not split (a linear bound for the regex)."""
    if len(text) > MAX_DECORATED_CHARS or not any(c.isalpha() for c in text):
        return None
    match = _TRAILING_TEXT.match(text)
    if match is None:
        return None
    return match.group("value").strip(), match.group("group") if match.group("group") is not None else match.group(
        "plain"
    )


def _trailing_words(text: str) -> Reading | None:
    """Number words and nonsense after a value (issue 41): a multiplier after a plain number is read
    (``2\\text{ million}`` is 2000000, ``3\\text{ dozen}`` is 36, ``1.5 thousand`` is 1500); a number word, a
    fraction word or an operation (:data:`tirl.reward.normalize.NOT_UNIT_WORDS`: ``2\\text{ squared}``, ``2 \\text{
    and a half}``, ``2 hundred and five``), or a multiplier after anything but a plain number, is no single value
    (a problem: the answer scores 0). None when the trailing words (if any) are none of these (a unit: it drops)."""
    split = trailing_text(text)
    if split is None:
        return None
    value, words = split
    found = [w.lower() for w in _WORD.findall(words)]
    special = [w for w in found if w in NOT_UNIT_WORDS or w in MULTIPLIER_WORDS]
    if not special:
        return None
    multipliers = []
    for word in found:
        if word not in MULTIPLIER_WORDS:
            break
        multipliers.append(MULTIPLIER_WORDS[word])
    number = _PLAIN_NUMBER.match(value)
    rest = found[len(multipliers) :]
    if multipliers and number and not any(w in NOT_UNIT_WORDS or w in MULTIPLIER_WORDS for w in rest):
        whole, fraction = number.group(2).replace(",", ""), number.group(3) or ""
        amount = Fraction(int(whole + fraction), 10 ** len(fraction)) if len(whole + fraction) <= 100 else None
        if amount is not None:
            for factor in multipliers:
                amount *= factor
            sign = "-" if number.group(1) in ("-", "\u2212") and amount else ""
            if amount.denominator == 1:
                return Reading(f"{sign}{amount.numerator}")
            return Reading(f"{sign}\\frac{{{amount.numerator}}}{{{amount.denominator}}}")
    return Reading(text, f"{special[0]!r} after a value is not a unit: the answer is not one value")


_REPEATING_HINTS = ("\\overline", "\\bar", "\\dot")
_REPEATEND = r"\\(?:overline|bar)\s*(?:\{\s*(\d+)\s*\}|(\d))"
_DOTTED = r"\\dot\s*(?:\{\s*\d\s*\}|\d)"
_REPEATING = re.compile(
    r"(?<![\d.])(\d*)\.(\d*)(?:" + _REPEATEND + r"|(" + _DOTTED + r"(?:\d*" + _DOTTED + r")?))(?![\d])"
)
_EMPTY_HINTS = ("\\varnothing", "\\O", "∅")
_EMPTY_SET = re.compile(r"\\varnothing(?![A-Za-z])|\\O(?![A-Za-z])|∅")


def _repeating_fraction(match: re.Match[str]) -> str:
    """The exact value of a repeating decimal (``0.1\\overline{6}``, ``0.\\dot{1}4\\dot{2}``) as ``\\frac{p}{q}``
    (or an integer: ``0.\\overline{9}`` is 1); one of more than :data:`MAX_READ_DIGITS` digits is left as written
    (Python refuses to convert such integers; math-verify then reads no number from it)."""
    whole, fixed = match.group(1) or "0", match.group(2)
    repeat = match.group(3) or match.group(4)
    if repeat is None:  # dot notation: the repetend runs from the first dotted digit to the last
        repeat = re.sub(r"\\dot\s*\{?\s*(\d)\s*\}?", r"\1", match.group(5))
    if 2 * (len(whole) + len(fixed) + len(repeat)) > MAX_READ_DIGITS:
        return match.group(0)
    value = (
        Fraction(int(whole))
        + Fraction(int(fixed or "0"), 10 ** len(fixed))
        + Fraction(int(repeat), 10 ** len(fixed) * (10 ** len(repeat) - 1))
    )
    if value.denominator == 1:
        return str(value.numerator)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


# ------------------------------------------------------------------------------------- committed answers
_OR_COMMANDS = re.compile(r"\\(?:lor|vee)(?![A-Za-z])")
_APPROX_COMMANDS = re.compile(r"\\(?:approx|thickapprox|simeq)(?![A-Za-z])|≈")
_TEXT_WRAPPER = re.compile(
    r"\\(?:text|textrm|textbf|textit|textnormal|mathrm|mathbf|mathit|mbox|hbox|operatorname)"
    r"\s*\{([^{}]*)\}"
)
_OR_WORD = re.compile(r"(?<![A-Za-z\\])or(?![A-Za-z])", re.IGNORECASE)
_RELATION = re.compile(r"[=<>≤≥≠∈]|\\(?:[lg]eq?|[lg]eqslant|[lg]t|neq?|in|notin|not)(?![A-Za-z])")


def _plain_words(text: str) -> str:
    """``text`` with text commands unwrapped, ``\\lor``/``\\vee`` as "or", ``\\approx`` as "approximately" and
    every other command name removed (``\\not``, ``\\notin`` are relations, not words)."""
    for _ in range(4):
        new = _TEXT_WRAPPER.sub(lambda m: " " + m.group(1) + " ", text)
        if new == text:
            break
        text = new
    text = _OR_COMMANDS.sub(" or ", text)
    text = _APPROX_COMMANDS.sub(" approximately ", text)
    return text


def hedge_words(text: str) -> frozenset[str]:
    """The hedge and negation words (:data:`tirl.reward.normalize.HEDGE_WORDS`, ``NEGATION_WORDS``) in ``text``,
    lowercase; ``\\lor``/``\\vee`` count as "or", ``\\approx`` as "approximately". Never raises on a string.

    A word is a whole run of ASCII letters not led by a backslash (``\\not``, ``\\notin`` are commands; the
    content of ``\\text{or}`` is a word): one scan of the text, so the integer path stays fast.
    """
    if not isinstance(text, str):
        return frozenset()
    runs = _LETTER_RUN.findall(text)
    if not runs and "≈" not in text:
        return _NO_WORDS
    found = {_WORD_OF.get(run.lower()) for run in runs}
    found.discard(None)
    if "≈" in text:
        found.add("approximately")
    return frozenset(found)  # type: ignore[arg-type]


_LETTER_RUN = re.compile(r"\\?[A-Za-z]+")
_NO_WORDS: frozenset[str] = frozenset()
_WORD_OF = {word: word for word in HEDGE_WORDS | NEGATION_WORDS if word.isalpha()}
_WORD_OF.update(
    {
        "isn": "isnt",
        "\\lor": "or",
        "\\vee": "or",
        "\\approx": "approximately",
        "\\thickapprox": "approximately",
        "\\simeq": "approximately",
    }
)


def is_list(text: str) -> bool:
    """True when ``text`` is a list of values: a comma outside brackets (``2, 3``; not ``(2, 3)`` or ``[2,5)``),
    or a set in braces (``\\{2, 3\\}``)."""
    body = strip_math_delimiters(text)
    if body.startswith("\\{") and body.endswith("\\}") and "," in body:
        return True
    depth = 0
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            return True
        i += 1
    return False


_APPROX_WORD = re.compile(r"(?<![A-Za-z\\])approx(?:imately)?(?![A-Za-z])", re.IGNORECASE)
_APPROX_DECIMAL = re.compile(r"^[+\-\u2212]?\d{1,40}(?:\.\d{1,40})?$")


def approximation(answer: str) -> tuple[str, str] | None:
    """``(exact, decimal)`` when ``answer`` is an exact value followed by its own approximation (issue 43):
    ``\\pi \\approx 3.14`` gives ``("\\pi", "3.14")``, ``288\\pi \\approx 904.78`` gives ``("288\\pi", "904.78")``.

    Exactly one ``\\approx`` (or ``\\simeq``, ``\\thickapprox``, ``≈``), a non-empty value before it and a plain
    decimal number (up to 40 digits on each side of the point) after it; None otherwise: a chain
    (``\\pi \\approx 3.14 \\approx 3.1``), an approximation first (``\\approx 3.14``) or of something that is not
    a number stays a hedge. Whether the decimal is the exact value to its digits needs sympy: the worker decides
    (:func:`tirl.reward.worker.check`)."""
    parts = _APPROX_COMMANDS.split(answer)
    if len(parts) != 2:
        return None
    exact = parts[0].strip()
    decimal = "".join(strip_trailing_punctuation(parts[1]).split())
    if not exact or not _APPROX_DECIMAL.match(decimal):
        return None
    return exact, decimal


_REMARK_EXPONENT = re.compile(r"\^\s*\{?\s*[23]\s*\}?")


def _numbered_remark(answer: str, gold: str | None) -> str | None:
    """Why a value followed by a text command holding another number (``2 \\text{ (could be 3)}``, ``2 \\text{
    (3 also works)}``) commits to no single answer, or None (issue 41). A unit's exponent (``\\text{ m^2}``) is
    not a number; a reference that ends with the same text allows it."""
    if "\\" not in answer:
        return None
    split = trailing_text(ascii_digits(answer))
    if split is None or not split[0]:
        return None
    value, words = split
    if not any(c.isdigit() for c in _REMARK_EXPONENT.sub("", words)) or value.endswith("_"):
        return None
    if isinstance(gold, str) and words.strip() and words.strip() in gold:
        return None
    return "another number in a remark after the value: a box must hold one committed answer"


def commitment_problem(answer: str, gold: str | None = None, gold_words: frozenset[str] | None = None) -> str | None:
    """Why the box content ``answer`` commits to no single answer, or None when it does (issue 23).

    A box must hold one committed answer. It does not when it holds

    * a **hedge** (``possibly``, ``maybe``, ``perhaps``, ``probably``, ``likely``, ``either``, ``approximately``,
      ``\\approx``, ``about``, ``roughly``, ``could``, ...): ``2 \\text{ (or possibly 3)}``; but an exact value
      followed by its own approximation (``\\pi \\approx 3.14``, :func:`approximation`) is one committed answer,
      whose approximation the worker checks;
    * a **negation** (``not``, ``no``, ``wrong``, ``incorrect``, ``false``, ``never``, ...): ``5\\text{ is wrong}``;
    * a **remark holding another number** after the value (``2 \\text{ (could be 3)}``, ``2 \\text{ (3 also
      works)}``; issue 41);
    * **alternatives** joined by "or" (``\\text{ or }``, a plain ``or``, ``\\lor``, ``\\vee``): ``2\\text{ or 3}``,
      ``2 or three``. "or" between conditions (``x<2 \\text{ or } x>3``, ``x=2 \\text{ or } x=3``: every part holds
      a relation) joins a solution set, and "or" against a reference that is itself a list or set (``2, 3``,
      ``\\{2, 3\\}``) lists its elements: neither is a hedge.

    A word the reference itself contains is part of the answer, never a hedge (a reference ``\\text{No}`` allows
    the answer ``\\text{no}``). Words are matched whole, case-insensitively, in text commands and plain text;
    LaTeX command names (``\\not``, ``\\notin``, ``\\neq``) are not words.

    Args:
        answer: the box content.
        gold: the reference answer (its words are exempt; a list reference allows "or"), or None.
        gold_words: :func:`hedge_words` of the reference, when already known (saves reading it again).

    Returns:
        A one-line reason, or None. Never raises on a string.
    """
    found = hedge_words(answer)
    if not found:
        return _numbered_remark(answer, gold)
    if gold_words is None:
        gold_words = hedge_words(gold) if isinstance(gold, str) else frozenset()
    found = found - gold_words
    if "approximately" in found and approximation(answer) is not None and not _APPROX_WORD.search(answer):
        # "\\pi \\approx 3.14": an exact value and its own approximation, one committed answer (issue 43); the
        # worker checks that the approximation is the exact value to its digits
        found = found - {"approximately"}
    if "or" in found:
        pieces = _OR_WORD.split(_plain_words(ascii_digits(answer)))
        if all(_RELATION.search(piece) for piece in pieces) or (isinstance(gold, str) and is_list(gold)):
            found = found - {"or"}
    if not found:
        return _numbered_remark(answer, gold)
    hedges = sorted(found & HEDGE_WORDS - {"or"})
    negations = sorted(found & NEGATION_WORDS)
    if hedges:
        return f"a hedge in the box ({hedges[0]!r}): a box must hold one committed answer"
    if negations:
        return f"a negation in the box ({negations[0]!r}): a box must hold one committed answer"
    return "alternatives joined by 'or' in one box: a box must hold one committed answer"


def _mixed(sign: str, whole: str, numerator: str, denominator: str, text: str, prefix: str = "") -> Reading:
    """whole + numerator/denominator as ``\\frac{p}{q}`` (sign on both parts), when the fraction is proper.

    Parts of more than :data:`MAX_READ_DIGITS` digits together are not read (a problem, reward 0): Python refuses
    to convert such integers to and from text (issue 41: ``"1" * 5000 + " 1/2"`` raised ``ValueError``)."""
    if len(whole) + len(numerator) + len(denominator) > MAX_READ_DIGITS:
        return Reading(text, f"a mixed number of over {MAX_READ_DIGITS} digits is not read")
    w, n, d = int(whole), int(numerator), int(denominator)
    if d == 0 or n >= d:
        return Reading(text, "numbers separated by whitespace are not one number")
    minus = "-" if sign in ("-", "\u2212") else ""
    return Reading(f"{prefix}{minus}\\frac{{{w * d + n}}}{{{d}}}")


_DECIMAL = re.compile(r"^([+\-\u2212]?)(\d*)\.(\d+)$")
_FRACTION = re.compile(
    r"^([+\-\u2212]?)\s*(?:\\frac\s*(?:\{\s*([+\-\u2212]?\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))"
    r"|([+\-\u2212]?\d+)\s*/\s*(\d+))$"
)
_MAX_KEY_DIGITS = 1000
_TRAILING_PERCENT = re.compile(r"(?<=\d)\\?%$")


def value_key(answer: str | None) -> str | None:
    """A key under which equal answers meet (the vote key of maj@k), or None for no answer; see
    :func:`_value_key` for the grouping. Never raises (issue 41): when reading the answer raises, the answer
    gets a key of its own (``"#"`` and its text), so it votes only with the very same text, and the exception is
    logged once per type and location on the ``tirl.reward`` logger."""
    try:
        return _value_key(answer)
    except Exception as exc:  # noqa: BLE001 - maj@k's grouping must never fail a run
        from tirl.reward.types import bug_detail

        detail = bug_detail("value_key", exc)
        signature = detail.partition(": ")[0]
        if signature not in _KEY_BUGS_SEEN:
            _KEY_BUGS_SEEN.add(signature)
            logging.getLogger("tirl.reward").error("maj@k key of an answer raised (own key used): %s", detail)
        return "#" + answer if isinstance(answer, str) else None


_KEY_BUGS_SEEN: set[str] = set()


def _value_key(answer: str | None) -> str | None:
    """A key under which equal answers meet (the vote key of maj@k), or None for no answer.

    A hedged answer (:func:`commitment_problem`: ``2\\text{ or 3}``) gets a key of its own (``"?..."``), so it
    never votes for a value. Otherwise the answer is read (:func:`read_answer`: punctuation, constants, base
    numerals, mixed numbers, repeating decimals, Unicode digits), a single-variable assignment prefix is dropped
    (``x = 5`` is ``5``), then: a number of the integer policy (``1,000``, ``\\$18``, ``5.0``, ``１２``), a decimal
    or a fraction of integers (``0.5``, ``12.5\\%``, ``\\dfrac{1}{2}``, ``1/2``, ``\\frac{-3}{4}``) becomes its
    exact value (``"=1/2"``); anything else its normal text
    (:func:`tirl.reward.normalize.normalize_text` without whitespace). Equal keys mean equal answers; different
    keys may still be equal answers that only the symbolic verifier can match (``\\frac{\\sqrt{2}}{2}`` and
    ``\\frac{1}{\\sqrt{2}}``). Never raises on a string.
    """
    from fractions import Fraction

    from tirl.reward.normalize import canonical_integer, normalize_text

    if not isinstance(answer, str) or not answer.strip():
        return None
    if commitment_problem(answer) is not None:  # a hedged answer votes for no value ("2 or 3" is not 2)
        return "?" + " ".join((normalize_text(answer) or "").split())
    reading = read_answer(answer)
    text = _ASSIGNMENT.sub("", reading.text) if reading.problem is None else reading.text
    if reading.problem is None:
        integer = canonical_integer(text)
        if integer is not None:
            return "=" + integer if len(integer) > _MAX_KEY_DIGITS else "=" + str(Fraction(int(integer)))
        plain = normalize_text(text) or ""
        plain = _TRAILING_PERCENT.sub("", plain)  # 12.5\\% votes with 12.5, as 50\\% does with 50
        decimal = _DECIMAL.match(plain)
        fraction = _FRACTION.match(plain)
        if decimal and len(plain) <= _MAX_KEY_DIGITS:
            value = Fraction(
                int(decimal.group(2) or "0") * 10 ** len(decimal.group(3)) + int(decimal.group(3)),
                10 ** len(decimal.group(3)),
            )
            return "=" + str(-value if decimal.group(1) else value)
        if fraction and len(plain) <= _MAX_KEY_DIGITS:
            numerator = int((fraction.group(2) or fraction.group(3) or fraction.group(6)).replace("\u2212", "-"))
            denominator = int(fraction.group(4) or fraction.group(5) or fraction.group(7))
            if denominator:
                value = Fraction(numerator, denominator)
                return "=" + str(-value if fraction.group(1) else value)
    if reading.problem is not None:  # "2 3" is not "23": keep the separation
        return "!" + " ".join((normalize_text(text) or "").split())
    key = "".join((normalize_text(text) or "").split())
    return key or None
