"""``tirl view``: one self-contained HTML file that shows a run's trajectories, offline.

The page (Jinja2 template ``templates/viewer.html.j2``, with its CSS and a small vanilla-JS script inlined)
embeds the run as JSON and renders only the current page of trajectories (50 per page), and a trajectory's
turns only when it is opened, so large runs stay usable (tested with 10,000 trajectories). Python code of
tool calls is highlighted with Pygments on the Python side; every other text is inserted as text, never as
HTML. No network access is needed or made: no fonts, scripts or images are loaded from anywhere.

Per trajectory it shows: problem, gold answer, extracted answer, verdict and reward; each assistant turn's
model-generated text (loss mask 1) told apart from the injected tool responses (loss mask 0); every tool call
with its highlighted code, stdin input, class (``ok``/``error``/``timeout``/``parse_error``), the tool that ran it
when not the default ``python`` (``python_session`` also says how many earlier calls it re-ran), sandbox status,
duration and output; finish reason and token counts. Training runs add step, group and RoC's decision (kept
or dropped, p_err, p_format, the group's selection status and a reason). When ``tirl analyze entropy`` has
written ``RUN_DIR/entropy/<label>.jsonl``, a token view colours each generated token by its entropy.

Filters: verdict (correct / wrong / unscored), truncated, tool-call class, RoC decision, the reward-hacking
audit (:mod:`tirl.protocol.audit`: any flag, or one kind: tool output with template strings, hedged answer,
memory or socket probe, answer first seen in tool output; the flags are listed in the trajectory), and a text
search over problem, answers and turn texts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tirl.protocol.audit import AUDIT_KEYS, audit_record
from tirl.view.load import RunRecords, read_entropy, read_run, record_id

PAGE_SIZE = 50
_MAX_TEXT = 20_000  # characters of one text field shown; longer ones keep head and tail


def _clip(text: Any, limit: int = _MAX_TEXT) -> str:
    s = "" if text is None else str(text)
    if len(s) <= limit:
        return s
    half = limit // 2
    return f"{s[:half]}\n...[{len(s) - limit} characters not shown]...\n{s[-half:]}"


def _num(x: Any) -> float | None:
    """A finite number, else None (bools, strings, NaN and infinities from a damaged file are not numbers)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x) if isinstance(x, float) else x


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def _s(x: Any) -> str:
    return "" if x is None else str(x)


class _Highlighter:
    """Pygments' Python lexer and HTML formatter (inline classes; the CSS goes into the page once)."""

    def __init__(self) -> None:
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer

        self.lexer = PythonLexer()
        self.formatter = HtmlFormatter(nowrap=True)
        self.css = HtmlFormatter(style="default").get_style_defs(".code")

    def __call__(self, code: str) -> str:
        from pygments import highlight

        return highlight(_clip(code), self.lexer, self.formatter)


def _tool_call(raw: dict[str, Any], hl: _Highlighter) -> dict[str, Any]:
    call, result = _d(raw.get("call")), _d(raw.get("result"))
    args = _d(call.get("arguments"))
    code = args.get("code") if isinstance(args.get("code"), str) else ""
    parse_error = call.get("kind") if "kind" in call and "arguments" not in call else None
    output = "\n".join(_s(result[k]) for k in ("stdout", "display", "stderr", "traceback") if result.get(k))
    details = _d(raw.get("details"))
    replayed = _num(details.get("replayed_cells"))
    return {
        "cls": _s(raw.get("cls", "parse_error" if parse_error else "error")),
        "name": _s(call.get("name", "")),
        "tool": _s(raw.get("tool", "")),
        "session": f"{int(replayed)} earlier calls re-run" if replayed is not None else "",
        "code_html": hl(code) if code else "",
        "raw": _clip(call.get("raw", "")) if not code else "",
        "input": _clip(args.get("input", "")) if isinstance(args.get("input", ""), str) else "",
        "parse_error": f"{parse_error}: {_s(call.get('message', ''))}" if parse_error else "",
        "status": _s(result.get("status", "")) if result else "not run",
        "duration": _num(result.get("duration_s")),
        "exit": _num(result.get("exit_code")),
        "output": _clip(output),
        "response": _clip(raw.get("response_text", "")),
    }


def _turns(rec: dict[str, Any], hl: _Highlighter) -> list[dict[str, Any]]:
    out = []
    for t in _l(rec.get("turns")):
        if not isinstance(t, dict):
            continue
        calls = [_tool_call(c, hl) for c in _l(t.get("tool_calls")) if isinstance(c, dict)]
        responses = _l(t.get("tool_responses"))
        if not calls and responses:  # training logs of older tirl versions: responses only
            calls = [
                {
                    "cls": cls,
                    "name": "",
                    "tool": "",
                    "session": "",
                    "code_html": "",
                    "raw": "",
                    "input": "",
                    "parse_error": "",
                    "status": "",
                    "duration": None,
                    "exit": None,
                    "output": "",
                    "response": _clip(r),
                }
                for cls, r in zip(_pad(rec.get("tool_calls"), len(responses)), responses)
            ]
        out.append(
            {
                "text": _clip(t.get("text", "")),
                "n": _num(t.get("num_tokens")),
                "finish": _s(t.get("finish_reason", "")),
                "calls": calls,
            }
        )
    return out


def _pad(classes: Any, n: int) -> list[str]:
    cls = [str(c) for c in classes] if isinstance(classes, list) else []
    return (cls + ["?"] * n)[:n]


def _roc_reason(rec: dict[str, Any]) -> str:
    kept, sel, reward = rec.get("kept"), rec.get("selection"), _num(rec.get("reward"))
    if not isinstance(kept, bool):
        return ""
    if kept:
        return "kept (group kept whole: not more scored trajectories than G)" if sel == "undersized" else "kept"
    if reward is None:
        return f"dropped: not scorable (verifier status {rec.get('verify_status')})"
    if sel == "dropped_equal":
        return "dropped: every reward in the group was equal (dynamic filter)"
    if sel == "empty":
        return "dropped: nothing in the group could be scored"
    if reward > 0:
        if rec.get("roc_mode") == "topk":
            return "dropped: correct, but ranked below the kept ones by p_err + p_format"
        return "dropped: correct, not drawn (positives are drawn with weight 1 / (p_err + p_format))"
    return "dropped: wrong, not drawn (negatives are drawn uniformly)"


def _entropy_tokens(row: dict[str, Any], mask: list[int] | None) -> list[list[Any]]:
    toks, ents = _l(row.get("tokens")), _l(row.get("entropy"))
    out = []
    for i, tok in enumerate(toks):
        e = _num(ents[i]) if i < len(ents) else None
        m = mask[i] if mask is not None and i < len(mask) else (0 if e is None else 1)
        out.append([_s(tok), None if e is None else round(float(e), 3), 1 if m == 1 else 0])
    return out


def view_records(run: RunRecords, entropy: dict[str, dict[str, dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """The page's JSON records, one per trajectory (see the module docstring for what each holds)."""
    hl = _Highlighter()
    entropy = entropy or {}
    out = []
    for i, rec in enumerate(run.records):
        rid = record_id(run.kind, rec)
        mask = rec.get("loss_mask") if isinstance(rec.get("loss_mask"), list) else None
        if run.kind == "eval":
            reward: float | None = 1.0 if rec.get("correct") is True else 0.0
            status = _s(_d(rec.get("verdict")).get("status", "ok"))
            if status in ("unparsable_gold", "verifier_error"):
                reward = None
            gold = rec.get("gold")
            head = f"{_s(rec.get('benchmark'))} · {_s(rec.get('problem_id'))} · sample {_s(rec.get('sample_index', 0))}"
            classes = rec.get("tool_classes")
        else:
            reward = _num(rec.get("reward"))
            status = _s(rec.get("verify_status", ""))
            gold = rec.get("answer")
            head = (
                f"step {_s(rec.get('step'))} · group {_s(rec.get('group', '?'))} · {_s(rec.get('problem_id'))} "
                f"· sample {_s(rec.get('sample', 0))}"
            )
            classes = rec.get("tool_calls")
        verdict = "unscored" if reward is None else ("correct" if reward > 0 else "wrong")
        turns = _turns(rec, hl)
        if isinstance(classes, list):
            classes = [_s(c) for c in classes]
        else:
            classes = [c["cls"] for t in turns for c in t["calls"]]
        ids = rec.get("response_ids")
        n_resp = _num(rec.get("num_response_tokens", len(ids) if isinstance(ids, list) else None))
        model_tokens = _num(rec.get("model_tokens"))
        answer = rec.get("final_answer")
        ents = {label: _entropy_tokens(rows[rid], mask) for label, rows in entropy.items() if rid in rows}
        audit = audit_record(rec)
        out.append(
            {
                "i": i,
                "id": rid,
                "head": head,
                "step": _num(rec.get("step")),
                "group": _num(rec.get("group")),
                "problem": _clip(rec.get("problem", "")),
                "prompt": _clip(rec.get("prompt_text", "")),
                "gold": _s(gold),
                "answer": None if answer is None else _s(answer),
                "verdict": verdict,
                "reward": reward,
                "verify_status": status,
                "finish": _s(rec.get("finish_reason", "")),
                "truncated": rec.get("finish_reason") in ("length", "context"),
                "model_tokens": model_tokens,
                "response_tokens": n_resp,
                "injected_tokens": n_resp - model_tokens if n_resp is not None and model_tokens is not None else None,
                "kept": rec.get("kept") if isinstance(rec.get("kept"), bool) else None,
                "p_err": _num(rec.get("p_err")),
                "p_format": _num(rec.get("p_format")),
                "selection": _s(rec.get("selection")),
                "reason": _roc_reason(rec),
                "classes": classes,
                "turns": turns,
                "entropy": ents,
                "audit": [k for k in AUDIT_KEYS if k != "flagged" and getattr(audit, k)],
                "audit_details": [_clip(d, 500) for d in audit.details],
            }
        )
    return out


def render_html(run_dir: str | Path, *, title: str | None = None) -> str:
    """The viewer page of a run folder, as one HTML string.

    Raises:
        FileNotFoundError: the folder holds no trajectories (see :func:`tirl.view.load.read_run`).
    """
    from jinja2 import Environment, PackageLoader, select_autoescape

    run = read_run(run_dir)
    records = view_records(run, read_entropy(run.root))
    env = Environment(loader=PackageLoader("tirl.view", "templates"), autoescape=select_autoescape(["j2", "html"]))
    here = Path(__file__).parent / "templates"
    meta = {
        "kind": run.kind,
        "root": str(run.root),
        "count": len(records),
        "skipped_lines": run.skipped_lines,
        "page_size": PAGE_SIZE,
        "entropy_labels": sorted({k for r in records for k in r["entropy"]}),
        "steps": sorted({r["step"] for r in records if r["step"] is not None}),
    }
    return env.get_template("viewer.html.j2").render(
        title=title or f"tirl view: {Path(run_dir).resolve().name}",
        meta=meta,
        records=records,
        summary=run.summary,
        css=(here / "viewer.css").read_text(encoding="utf-8") + "\n" + _Highlighter().css,
        pct=lambda x: "–" if _num(x) is None else f"{100 * x:.1f} %",
        num=lambda x, d=2: "–" if _num(x) is None else f"{x:.{d}f}",
        script=(here / "viewer.js").read_text(encoding="utf-8"),
    )


def write_view(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the viewer page (default ``RUN_DIR/view.html``) and return its path.

    Raises:
        FileNotFoundError: the folder holds no trajectories.
    """
    html = render_html(run_dir)
    path = Path(out) if out is not None else Path(run_dir) / "view.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path


__all__ = ["PAGE_SIZE", "render_html", "view_records", "write_view"]
