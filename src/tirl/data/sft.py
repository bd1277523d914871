"""SFT conversations: the packaged cold-start sets converted into tirl's protocol turns.

Covers what ``tirl train sft`` reads: :class:`SFTExample` records (a user message and the assistant turns as
:class:`tirl.protocol.ConversationTurn`, ready for :func:`tirl.protocol.render_conversation_ids`) from the
packaged sets (:data:`SFT_SETS`, gzip JSONL under ``tirl/data/sft_files/``; sources, licences and the unchanged bytes
in ``PROVENANCE.md`` there), and their rendering to token ids with the loss mask (:func:`render_sft_example`).
It does not train (:mod:`tirl.train.sft`) and does not load RL problems (:mod:`tirl.data.training`).

Conversion rules (so the SFT targets obey the protocol the agent loop and the verifier use):

* **gsm8k_tir** (OpenAI-style tool-calling conversations derived from GSM8K train): every assistant message
  with ``tool_calls`` becomes one turn: its text content (when not empty), then each call written by
  :func:`tirl.protocol.parse.render_tool_call` in the configured ``protocol.tool_call_format`` (by default
  ``<tool_call>\\n{"name": ..., "arguments": {"code", "input"}}\\n</tool_call>``, the configured function name),
  joined by newlines; the following ``tool`` messages become
  that turn's tool responses, rendered by :func:`tirl.protocol.response.render_tool_response` as the sandbox's stdout
  would be. The final message's last line ``The answer is $\\boxed{N}$.`` becomes the answer block: the turn
  text is ``{reasoning}</reason> <answer>The answer is \\boxed{N}.</answer>`` (the prefill ``<reason>`` opens
  every turn; tool-call turns leave it open, as in the README's example). Each converted example is checked:
  every call parses back to its code, and :func:`tirl.protocol.extract_answer` of the final turn is the row's
  answer; a row that fails raises ``ValueError``.
* **oasst** (human-ranked chat replies): the first user/assistant exchange only (the protocol has no second user
  turn); the reply is given as the answer of an empty reasoning block: ``</reason> <answer>{reply}</answer>``,
  so instruction following is learnt in the same frame (system prompt with the tool, ``<reason>`` prefill) the
  model sees at RL and evaluation time.

* **programs** (generated, :mod:`tirl.data.sft_programs`): one call with a complete program (loops, ``math``),
  its output fed back, the answer boxed from it.
* **programs_recovery** (generated, :mod:`tirl.data.sft_recovery`): a first call whose program fails (the real
  error fed back), a sentence reading the error, a second call with the fix, its output, the answer.

* **trajectories** (rejection sampling, :func:`trajectory_examples`): the model's own correct trajectories from
  ``tirl eval`` runs (``trajectories:PATH``, PATH an eval's ``trajectories.jsonl`` or its folder), kept when the
  verifier scored them correct and they ended with an answer, trained on **the exact tokens sampled** (the stored
  ``prompt_ids``, ``response_ids`` and ``loss_mask``: nothing is re-rendered, so the prompt, the tool-call format
  and the tool responses are the ones the evaluation used); identical responses to one problem are kept once,
  and at most ``data.max_per_problem`` per problem (the first by sample index). This is rejection-sampling
  fine-tuning (RFT; Yuan et al. 2023, "Scaling relationship on learning mathematical reasoning with LLMs"): the
  model learns the format from its own successes without imitating another model's reasoning.
  With ``data.trajectory_tokens: rerender`` (:func:`rerendered_example`) each kept record is rebuilt as turns
  instead and rendered by the SFT recipe's ``protocol``: every call's original text (its recorded ``span``:
  tagged, untagged or fenced) is replaced by the canonical call of :func:`tirl.protocol.parse.render_tool_call` in
  the SFT protocol's format, the recorded tool responses follow each turn, and the prompt is the SFT protocol's,
  so an instruction used only to sample the trajectories is dropped (context distillation) and untagged calls
  are learnt tagged. A record is skipped (and counted) when a call was a parse error, a canonical call does not
  parse back to the same code and input, or the re-rendered turns do not give the recorded answer.

Sources are named like the RL sets: ``gsm8k_tir`` (all rows), ``gsm8k_tir:N`` (the first N rows) or
``gsm8k_tir:A-B`` (rows A to B-1, e.g. to keep SFT problems apart from the ``gsm8k:150`` RL items);
``programs:N`` / ``programs:A-B`` and ``programs_recovery:N`` / ``programs_recovery:A-B`` (the generated sets need a
size).
"""

from __future__ import annotations

import collections
import itertools
import json
import logging
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.protocol import (
    ConversationTurn,
    ProtocolConfig,
    RenderedConversation,
    extract_answer,
    parse_tool_calls,
    render_conversation_ids,
)
from tirl.protocol.answer import extract_answer_from_turns
from tirl.protocol.config import resolve_config
from tirl.protocol.parse import render_tool_call
from tirl.protocol.render import END_OF_TURN_CANDIDATES
from tirl.protocol.response import render_tool_response
from tirl.protocol.types import ToolCall
from tirl.runs.layout import EVAL_TRAJECTORIES, eval_trajectories
from tirl.sandbox.types import ExecutionResult

logger = logging.getLogger(__name__)

SFT_DATA_DIR = Path(__file__).resolve().parent / "sft_files"

SFT_SETS: dict[str, dict[str, str]] = {
    "gsm8k_tir": {
        "file": "tir_gsm8k_train_calc2py.jsonl.gz",
        "kind": "tool",
        "license": "MIT",
        "upstream": "derived from openai/grade-school-math@3101c7d train (calculator annotations -> executed calls)",
    },
    "oasst": {
        "file": "chat_oasst_en_top_path.jsonl.gz",
        "kind": "chat",
        "license": "Apache-2.0",
        "upstream": "LAION-AI/Open-Assistant@f1e6ed9 model/model_eval/manual/data/en_100_tree.jsonl",
    },
}
"""Packaged SFT sets: name -> file under :data:`SFT_DATA_DIR`, kind (``tool``/``chat``), licence, upstream."""

GENERATED_PROGRAMS = "programs"
"""The generated source: one-program tool conversations (:mod:`tirl.data.sft_programs`), ``programs:N``."""

GENERATED_RECOVERY = "programs_recovery"
"""The generated source of recovery conversations (a failing call, the error read, the fix;
:mod:`tirl.data.sft_recovery`), ``programs_recovery:N``."""

_FINAL_LINE_RE = re.compile(r"^The answer is \$\\boxed\{(?P<box>.+)\}\$\.?\s*$")


@dataclass
class SFTExample:
    """One SFT conversation in tirl's protocol.

    Attributes:
        id: unique id (``gsm8k-train-00000``, ``oasst-<uuid>``).
        problem: the user message (the protocol's ``{problem}``).
        turns: the assistant turns, each without the prefill and the end-of-turn token; every turn but the last
            has tool responses.
        kind: ``tool`` (calls the Python tool) or ``chat``.
        source: upstream of the row.
        answer: the reference final answer for ``tool`` examples, else None.
        rendered: the exact token ids and loss mask when the example was sampled (``trajectories`` sources);
            :func:`render_sft_example` returns them unchanged. None: rendered from ``turns``.
    """

    id: str
    problem: str
    turns: list[ConversationTurn] = field(default_factory=list)
    kind: str = "tool"
    source: str = ""
    answer: str | None = None
    rendered: RenderedConversation | None = None


def _read_jsonl(path: Path) -> Iterable[dict[str, Any]]:
    """Rows of a (gzipped) JSONL file; ValueError with file and line on a bad line (tirl.data.training's reader)."""
    from tirl.data.training import _read_jsonl as read_numbered

    for _, row in read_numbered(path):
        yield row


def _call_arguments(call: dict[str, Any], where: str) -> tuple[str, str]:
    fn = call.get("function", call)
    args = fn.get("arguments")
    if isinstance(args, str):
        args = json.loads(args)
    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        raise ValueError(f"{where}: a tool call without string arguments.code")
    stdin = args.get("input", "")
    return args["code"], stdin if isinstance(stdin, str) else str(stdin)


def gsm8k_tir_example(row: dict[str, Any], config: ProtocolConfig | None = None) -> SFTExample:
    """Convert one ``tir_gsm8k_train_calc2py`` row (see the module docstring for the rules).

    Args:
        row: ``{"id", "problem", "answer", "messages": [user, (assistant with tool_calls, tool...)..., assistant]}``.
        config: protocol tags and function name.

    Returns:
        The example; ``answer`` is the row's answer.

    Raises:
        ValueError: an unexpected message layout, a final line that is not ``The answer is $\\boxed{N}$.``, a
            call that does not parse back to its code, or an extracted answer that differs from the row's.
    """
    cfg = resolve_config(config)
    where = str(row.get("id", "?"))
    messages = row.get("messages") or []
    if len(messages) < 2 or messages[0].get("role") != "user":
        raise ValueError(f"{where}: expected a user message first")
    problem = str(row.get("problem") or messages[0]["content"])
    turns: list[ConversationTurn] = []
    expected_calls: list[str] = []
    pending: ConversationTurn | None = None
    calls_left = 0
    for i, msg in enumerate(messages[1:], 1):
        role, content = msg.get("role"), (msg.get("content") or "").strip()
        if role == "tool":
            if pending is None or calls_left == 0:
                raise ValueError(f"{where}: message {i} is a tool response without a pending call")
            pending.tool_responses.append(
                render_tool_response(ExecutionResult(status="ok", stdout=content + "\n"), cfg)
            )
            calls_left -= 1
            continue
        if role != "assistant" or calls_left:
            raise ValueError(f"{where}: message {i}: expected an assistant message after all tool responses")
        calls = msg.get("tool_calls") or []
        if calls:
            blocks = []
            for call in calls:
                code, stdin = _call_arguments(call, f"{where}: message {i}")
                expected_calls.append(code)
                blocks.append(render_tool_call(code, stdin, cfg))
            pending = ConversationTurn("\n".join(([content] if content else []) + blocks))
            turns.append(pending)
            calls_left = len(calls)
            continue
        if i != len(messages) - 1:
            raise ValueError(f"{where}: an assistant message without tool calls before the end")
        reasoning, _, last = content.rpartition("\n")
        match = _FINAL_LINE_RE.match(last.strip())
        if match is None:
            raise ValueError(f"{where}: the final line is not 'The answer is $\\boxed{{N}}$.': {last!r}")
        box = match.group("box")
        reasoning = reasoning.strip()
        turns.append(
            ConversationTurn(
                f"{reasoning}{cfg.reason_close} {cfg.answer_open}The answer is \\boxed{{{box}}}.{cfg.answer_close}"
            )
        )
    if calls_left or not turns or turns[-1].tool_responses:
        raise ValueError(f"{where}: the conversation does not end with a final assistant answer")
    parsed = [c.arguments["code"] for t in turns for c in parse_tool_calls(t.text, cfg) if isinstance(c, ToolCall)]
    if parsed != expected_calls:
        raise ValueError(f"{where}: the written tool calls do not parse back to their code")
    answer = str(row.get("answer", box)).strip()
    if extract_answer(turns[-1].text, cfg) != answer:
        raise ValueError(f"{where}: the final turn's answer {extract_answer(turns[-1].text, cfg)!r} != {answer!r}")
    return SFTExample(
        id=where, problem=problem, turns=turns, kind="tool", source=str(row.get("source", "")), answer=answer
    )


def chat_example(row: dict[str, Any], config: ProtocolConfig | None = None) -> SFTExample:
    """Convert one chat row (``messages`` alternating user/assistant): the first exchange, the reply inside the
    answer tags of an empty reasoning block (module docstring).

    Raises:
        ValueError: no user message followed by a non-empty assistant reply.
    """
    cfg = resolve_config(config)
    where = str(row.get("id", "?"))
    messages = row.get("messages") or []
    if (
        len(messages) < 2
        or messages[0].get("role") != "user"
        or messages[1].get("role") != "assistant"
        or not (messages[1].get("content") or "").strip()
    ):
        raise ValueError(f"{where}: expected a user message and an assistant reply")
    reply = messages[1]["content"].strip()
    text = f"{cfg.reason_close} {cfg.answer_open}{reply}{cfg.answer_close}"
    return SFTExample(
        id=where,
        problem=messages[0]["content"].strip(),
        turns=[ConversationTurn(text)],
        kind="chat",
        source=str(row.get("source", "")),
    )


_CONVERTERS: dict[str, Callable[[dict[str, Any], ProtocolConfig | None], SFTExample]] = {
    "tool": gsm8k_tir_example,
    "chat": chat_example,
}


def _row_range(arg: str, name: str) -> slice:
    try:
        if "-" in arg:
            start, _, stop = arg.partition("-")
            return slice(int(start), int(stop))
        return slice(0, int(arg)) if arg else slice(None)
    except ValueError:
        raise ValueError(f"SFT source {name}:{arg}: expected {name}:N or {name}:START-STOP") from None


def load_sft_set(name: str, rows: slice = slice(None), config: ProtocolConfig | None = None) -> list[SFTExample]:
    """A packaged SFT set by name (:data:`SFT_SETS`), converted, rows ``rows`` in file order.

    Raises:
        KeyError: unknown name (the message lists the known ones).
        ValueError: a row that cannot be converted (see :func:`gsm8k_tir_example`, :func:`chat_example`).
    """
    if name not in SFT_SETS:
        raise KeyError(f"unknown SFT set {name!r}; known: {', '.join(sorted(SFT_SETS))}")
    spec = SFT_SETS[name]
    rows_read = _read_jsonl(SFT_DATA_DIR / spec["file"])
    if rows.stop is not None and (rows.start or 0) >= 0 and rows.stop >= 0:  # stop reading early
        rows_read = itertools.islice(rows_read, rows.stop)
    raw = list(rows_read)[rows]
    return [_CONVERTERS[spec["kind"]](row, config) for row in raw]


TRAJECTORIES = "trajectories"
"""The rejection-sampling source: ``trajectories:PATH`` (an eval's ``trajectories.jsonl`` or its folder)."""


TRAJECTORY_TOKENS: tuple[str, ...] = ("exact", "rerender")
"""What a ``trajectories:PATH`` example trains on (``data.trajectory_tokens``): ``exact``, the sampled token ids;
``rerender``, the turns re-rendered in the SFT protocol (:func:`rerendered_example`)."""

#: Texts that may end a recorded turn (the stop token decoded): the end-of-turn tokens, then common eos tokens.
_TURN_END_TEXTS = (*END_OF_TURN_CANDIDATES, "<|endoftext|>", "</s>", "<eos>")


def _turn_text_without_end(text: str) -> str:
    """A recorded turn's text without the end-of-turn (or eos) token the engine stopped on, which rendering adds."""
    for end in _TURN_END_TEXTS:
        if text.endswith(end):
            return text[: -len(end)]
    return text


def rerendered_example(record: dict[str, Any], config: ProtocolConfig | None = None) -> tuple[SFTExample | None, str]:
    """One ``tirl eval`` trajectory record rebuilt as turns of the SFT protocol ``config`` (``rerender`` mode).

    Each turn's text loses its final end-of-turn token, and each recorded call's original text (``call.span`` in
    the turn: a tagged block, an untagged object or a whole fence) becomes the canonical call written by
    :func:`tirl.protocol.parse.render_tool_call` in ``config``'s format, tags included; the calls' recorded
    ``response_text`` are the turn's tool responses. The prompt is not kept: :func:`render_sft_example` renders
    ``config``'s own for the record's ``problem``.

    Args:
        record: a line of ``trajectories.jsonl`` (:func:`tirl.eval.runner.trajectory_record`): ``problem``,
            ``turns`` (``text``, ``tool_calls`` with ``call``, ``cls``, ``response_text``), ``final_answer``.
        config: the SFT protocol.

    Returns:
        ``(example, "")``, or ``(None, reason)`` for a record that cannot be re-rendered faithfully:
        ``parse_error`` (a call that was not decoded: there is no call to write), ``layout`` (a turn before the
        last without calls, a final turn with calls, or a malformed turn), ``bad_span`` (call spans outside the
        turn or overlapping), ``unwritable_call`` (the format cannot write the code: ``qwen3_xml``),
        ``calls_changed`` (the re-rendered turns do not parse back to exactly the recorded calls' code and input,
        in order), ``answer_changed`` (they do not give the recorded final answer). Never raises on a record.
    """
    cfg = resolve_config(config)
    raw_turns = record.get("turns")
    if not isinstance(raw_turns, list) or not raw_turns:
        return None, "layout"
    turns: list[ConversationTurn] = []
    expected: list[list[tuple[str, str]]] = []
    for i, raw in enumerate(raw_turns):
        if not isinstance(raw, dict):
            return None, "layout"
        text, records = raw.get("text"), raw.get("tool_calls") or []
        if not isinstance(text, str) or not isinstance(records, list) or (i < len(raw_turns) - 1) != bool(records):
            return None, "layout"
        text = _turn_text_without_end(text)
        pieces: list[tuple[int, int, str]] = []
        calls: list[tuple[str, str]] = []
        for rec in records:
            call = rec.get("call") if isinstance(rec, dict) else None
            if not isinstance(call, dict) or rec.get("cls") == "parse_error" or "kind" in call:
                return None, "parse_error"
            args = call.get("arguments")
            span = call.get("span")
            if not isinstance(args, dict) or not isinstance(args.get("code"), str):
                return None, "parse_error"
            stdin = args.get("input", "")
            if not isinstance(stdin, str) or not isinstance(rec.get("response_text"), str):
                return None, "layout"
            if not (isinstance(span, (list, tuple)) and len(span) == 2 and all(isinstance(x, int) for x in span)):
                return None, "bad_span"
            start, end = span
            # spans index the recorded text, which the end-of-turn token only extends: still valid after the cut
            if not (pieces[-1][1] if pieces else 0) <= start < end <= len(text):
                return None, "bad_span"
            try:
                pieces.append((start, end, render_tool_call(args["code"], stdin, cfg)))
            except ValueError:
                return None, "unwritable_call"
            calls.append((args["code"], stdin))
        parts, pos = [], 0
        for start, end, canonical in pieces:
            parts += [text[pos:start], canonical]
            pos = end
        parts.append(text[pos:])
        turns.append(ConversationTurn("".join(parts), [r["response_text"] for r in records]))
        expected.append(calls)
    for turn, calls in zip(turns, expected):
        parsed = parse_tool_calls(turn.text, cfg)
        if [(c.code, c.stdin) if isinstance(c, ToolCall) else None for c in parsed] != calls:
            return None, "calls_changed"
    answer = extract_answer_from_turns([t.text for t in turns], cfg)
    if answer is None or answer != record.get("final_answer"):
        return None, "answer_changed"
    example = SFTExample(
        id="",
        problem=str(record.get("problem", "")),
        turns=turns,
        kind="tool" if any(expected) else "chat",
        answer=answer,
    )
    return example, ""


def trajectory_examples(
    path: str | Path,
    max_per_problem: int | None = None,
    *,
    tokens: str = "exact",
    config: ProtocolConfig | None = None,
    skipped: collections.Counter[str] | None = None,
) -> list[SFTExample]:
    """The correct, answered trajectories of a ``tirl eval`` run as SFT examples.

    Args:
        path: the run's ``trajectories.jsonl``, or the folder holding it.
        max_per_problem: keep at most this many per problem (the lowest sample indices first); None = all.
        tokens: ``exact`` (the stored token ids and loss mask, unchanged) or ``rerender`` (the turns re-rendered
            in ``config``, :func:`rerendered_example`; the records need no token fields).
        config: the SFT protocol (``rerender`` only).
        skipped: when given, counts the records ``rerender`` skipped, by reason (see :func:`rerendered_example`);
            they are also logged.

    Returns:
        One example per kept trajectory, in file order (``id``: ``benchmark/problem_id#sample_index``,
        ``kind``: ``tool`` when the trajectory called the tool, else ``chat``).

    Raises:
        ValueError: the file is missing, a line is not JSON, ``tokens`` is unknown, or (``exact``) a kept record
            lacks its token ids (written by a tirl older than the token fields) or has a loss mask of another
            length than its response.
    """
    if tokens not in TRAJECTORY_TOKENS:
        raise ValueError(f"data.trajectory_tokens must be one of {', '.join(TRAJECTORY_TOKENS)}, got {tokens!r}")
    file = Path(path)
    if file.is_dir():
        file = eval_trajectories(file)
    if not file.is_file():
        raise ValueError(f"SFT source {TRAJECTORIES}:{path}: no {EVAL_TRAJECTORIES} there (a tirl eval output)")
    kept: dict[str, list[tuple[int, SFTExample]]] = {}
    seen: set[tuple[str, int]] = set()
    dropped: collections.Counter[str] = collections.Counter()
    for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{file}:{n}: not JSON ({exc})") from None
        if not record.get("correct") or record.get("finish_reason") != "answer":
            continue
        problem_key = f"{record.get('benchmark', '')}/{record['problem_id']}"
        if tokens == "rerender":
            example, reason = rerendered_example(record, config)
            if example is None:
                dropped[reason] += 1
                continue
            example.id, example.source = f"{problem_key}#{record['sample_index']}", f"{file}:{n}"
            digest = (problem_key, hash(tuple((t.text, tuple(t.tool_responses)) for t in example.turns)))
        else:
            if not all(k in record for k in ("prompt_ids", "response_ids", "loss_mask")):
                raise ValueError(f"{file}:{n}: no prompt_ids/response_ids/loss_mask (re-run the evaluation)")
            response, mask = [int(x) for x in record["response_ids"]], [int(x) for x in record["loss_mask"]]
            if len(mask) != len(response) or not any(mask):
                raise ValueError(f"{file}:{n}: loss_mask does not fit response_ids")
            digest = (problem_key, hash(tuple(response)))
            example = SFTExample(
                id=f"{problem_key}#{record['sample_index']}",
                problem=str(record.get("problem", "")),
                kind="tool" if record.get("tool_classes") else "chat",
                source=f"{file}:{n}",
                answer=record.get("final_answer"),
                rendered=RenderedConversation(
                    prompt_ids=[int(x) for x in record["prompt_ids"]], response_ids=response, loss_mask=mask
                ),
            )
        if digest in seen:  # the same response sampled twice: once is enough
            continue
        seen.add(digest)
        kept.setdefault(problem_key, []).append((int(record["sample_index"]), example))
    if dropped:
        logger.warning(
            "%s: %d correct trajectories not re-rendered (%s)",
            file,
            sum(dropped.values()),
            ", ".join(f"{k}: {v}" for k, v in sorted(dropped.items())),
        )
        if skipped is not None:
            skipped.update(dropped)
    out: list[SFTExample] = []
    for examples in kept.values():
        examples.sort(key=lambda pair: pair[0])
        out.extend(e for _, e in examples[:max_per_problem])
    return out


def load_sft_examples(
    sources: Sequence[str],
    *,
    seed: int = 0,
    limit: int | None = None,
    shuffle: bool = True,
    config: ProtocolConfig | None = None,
    max_per_problem: int | None = None,
    trajectory_tokens: str = "exact",
    skipped: collections.Counter[str] | None = None,
) -> list[SFTExample]:
    """Examples from several packaged sets, de-duplicated by id, optionally shuffled (seeded) and capped.

    Args:
        sources: ``name``, ``name:N`` (first N rows) or ``name:START-STOP`` (rows START..STOP-1).
        seed: shuffling seed.
        limit: keep at most this many after shuffling.
        shuffle: shuffle the mixture.
        config: protocol configuration for the conversion.
        max_per_problem: for ``trajectories:PATH`` sources, the most trajectories kept per problem.
        trajectory_tokens: for ``trajectories:PATH`` sources, ``exact`` or ``rerender`` (in ``config``; see
            :func:`trajectory_examples`).
        skipped: counts the trajectories ``rerender`` skipped, by reason.

    Raises:
        ValueError: no sources, an unknown set or a malformed range.
    """
    if not sources:
        raise ValueError("no SFT data sources given")
    examples: list[SFTExample] = []
    for src in sources:
        name, _, arg = src.partition(":")
        if name == TRAJECTORIES:
            examples.extend(
                trajectory_examples(arg, max_per_problem, tokens=trajectory_tokens, config=config, skipped=skipped)
            )
            continue
        if name in (GENERATED_PROGRAMS, GENERATED_RECOVERY):
            rows = _row_range(arg, name)
            if rows.stop is None:
                raise ValueError(f"SFT source {src!r}: the generated set needs a size, {name}:N or {name}:A-B")
            if name == GENERATED_PROGRAMS:
                from tirl.data.sft_programs import program_examples as generate
            else:
                from tirl.data.sft_recovery import recovery_examples as generate
            examples.extend(generate(rows.stop, config=config)[rows])
            continue
        if name not in SFT_SETS:
            raise ValueError(
                f"SFT source {src!r} is neither a packaged set ({', '.join(SFT_SETS)}) nor "
                f"{GENERATED_PROGRAMS!r} / {GENERATED_RECOVERY!r} / {TRAJECTORIES}:PATH"
            )
        examples.extend(load_sft_set(name, _row_range(arg, name), config))
    first: dict[str, SFTExample] = {}
    for e in examples:
        first.setdefault(e.id, e)  # the first example of each id, in order
    unique = list(first.values())
    if shuffle:
        random.Random(seed).shuffle(unique)
    return unique[:limit] if limit is not None else unique


def render_sft_example(
    tokenizer: Any, example: SFTExample, config: ProtocolConfig | None = None
) -> RenderedConversation:
    """The example as token ids with its loss mask, exactly as the agent loop would build the same conversation
    (:func:`tirl.protocol.render_conversation_ids`: system prompt with the tool, ``<reason>`` prefill and
    tool-response segments masked 0, model turns and their end-of-turn tokens masked 1); a sampled example's own
    tokens (``example.rendered``) unchanged."""
    if example.rendered is not None:
        return example.rendered
    return render_conversation_ids(tokenizer, example.problem, example.turns, config)


__all__ = [
    "SFTExample",
    "SFT_DATA_DIR",
    "TRAJECTORY_TOKENS",
    "SFT_SETS",
    "TRAJECTORIES",
    "GENERATED_PROGRAMS",
    "GENERATED_RECOVERY",
    "chat_example",
    "gsm8k_tir_example",
    "load_sft_examples",
    "load_sft_set",
    "render_sft_example",
    "rerendered_example",
    "trajectory_examples",
]
