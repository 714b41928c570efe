"""What a model reads after a round: the cause first, then the evidence it can act on.

- the cause leads: a cut-off answer (finish_reason "length") says so before the SyntaxError it
  caused; a rank that lost its peer is shown as a consequence after the rank that stopped;
- the harness's own frames, its temporary job paths, build-path prefixes and the launcher's
  warnings are removed from messages and log tails (they are noise to a model, and paths change
  the chat's digest from run to run);
- speed uses the verdict and the noise band (a 0.99x whose band holds 1.0 is on par, not
  slower), and per size what bounds it (latency, link, HBM, FLOPs) and the roofline time;
- every round says which round of how many it is.
The outcome messages themselves come from outcome/; only their rendering for a model is here.
"""
from __future__ import annotations

import re

from ..protocol import SHOWS_LOG_TAIL, SLOW_TIERS, Outcome, tier

EXCERPT_LINES = 30         # lines of a failure message shown to the model
EXCERPT_CHARS = 2500       # and characters
LOG_LINES = 25             # lines of the job's log tail (crash, runtime error, compile error, timeout)
HIDDEN_LINE = "[a line of the hidden test harness was removed]"
CUT_OFF = ('Your answer was cut off at the output token limit (finish_reason "length"): the code ended '
           "mid-way{why}. Write a shorter module: fewer comments and no alternatives, only what runs.")

# ---- cleaning ---------------------------------------------------------------------------------------
_FRAME = re.compile(r'^(\s*)File "([^"]+)", line (\d+)(?:,? in (\S+))?\s*$')   # traceback or faulthandler
_HARNESS_PATH = re.compile(r"(?:/|^)pytest_kernelbench/|^<frozen ")
_CARET = re.compile(r"^\s*[\^~]+\s*$")
_JOB_CANDIDATE = re.compile(r"""(?:/[^\s"':]*)?/jobs/[^/\s"':]+/candidate/""")
_JOB = re.compile(r"""(?:/[^\s"':]*)?/jobs/[^/\s"':]+/""")
_SITE = re.compile(r"""/[^\s"':]*/(?:site|dist)-packages/""")
_EXTENSIONS = re.compile(r"""/[^\s"':]*/torch_extensions/""")
_SOURCE_PREFIX = re.compile(r"\[/[^\]\s]+\.(?:c|cc|cpp|cu|h|hpp):\d+\] ")
_LOG_PREFIX = re.compile(r"^(?:\[rank\d+\]:)?\[[WEI]\d{4} [\d:.]+ [^\]]+\] ")
# launcher and library lines that say nothing about the candidate
NOISE = (re.compile(r"TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated"),)
_OTHERS = re.compile(r" \((other ranks|its peers[^:()]*):\s")
# a rank that lost its peer says so; that is the consequence of the rank that stopped
_CONSEQUENCE = re.compile(r"Connection (?:closed|reset) by peer|GLHF|DistNetworkError|Broken pipe", re.I)


def clean(text: str) -> str:
    """Harness frames, temporary paths, build-path prefixes and launcher noise removed."""
    out: list[str] = []
    drop_indent: int | None = None      # inside a dropped frame: its lines are indented deeper
    lines = (text or "").splitlines()
    for i, line in enumerate(lines):
        frame = _FRAME.match(line)
        if frame:
            drop_indent = len(frame.group(1)) if _HARNESS_PATH.search(frame.group(2)) else None
            if drop_indent is not None:
                continue
        elif drop_indent is not None and line.startswith(" " * (drop_indent + 1)):
            continue
        else:
            drop_indent = None
        if _CARET.match(line) or any(p.search(line) for p in NOISE):
            continue
        orphan = not (out and _FRAME.match(out[-1])) and any(_FRAME.match(ln) for ln in lines[i + 1:i + 3])
        if not frame and line.startswith("    ") and orphan:
            continue                    # the source line of a frame whose header was cut off
        out.append(shorten(line))
    # a rank header with nothing left under it goes too
    out = [ln for i, ln in enumerate(out) if not (ln.startswith("--- rank") and
                                                  (i + 1 == len(out) or out[i + 1].startswith("--- rank")))]
    return "\n".join(out).strip("\n")


def shorten(line: str) -> str:
    line = _JOB_CANDIDATE.sub("", line)
    line = _JOB.sub("<job>/", line)
    line = _EXTENSIONS.sub("<build>/", line)
    line = _SITE.sub("", line)
    line = _SOURCE_PREFIX.sub("", line)
    return _LOG_PREFIX.sub("", line)


def split_others(message: str) -> tuple[str, tuple[str, str] | None]:
    """(message, (label, what the other ranks reported)) with the trailing "(other ranks: ...)"
    or "(its peers timed out waiting for it: ...)" taken out."""
    m = _OTHERS.search(message)
    if not m:
        return message, None
    depth, end = 1, None
    for j in range(m.end(), len(message)):
        depth += {"(": 1, ")": -1}.get(message[j], 0)
        if depth == 0:
            end = j
            break
    if end is None:
        return message, None
    return (message[:m.start()] + message[end + 1:]).strip(), (m.group(1), message[m.end():end].strip())


def lead(message: str, failure: str | None = None) -> tuple[str, str, tuple[str, str] | None]:
    """(cause, the rest of the message, (label, other ranks' report)): a first line that only says
    a peer was lost yields the lead to the other ranks' report where that names what stopped."""
    message, others = split_others(message)
    first, _, rest = message.partition("\n")
    if failure and first.startswith(f"{failure}: "):
        first = first[len(failure) + 2:]
    if others and _CONSEQUENCE.search(first) and not _CONSEQUENCE.search(others[1]):
        first, others = others[1], ("consequence", first)
    return first.strip(), rest.strip("\n"), others


# ---- speed ------------------------------------------------------------------------------------------
BOUND_TEXT = {"latency": "latency (dependent messages)", "link": "link bandwidth", "hbm": "HBM bandwidth",
              "flops": "tensor-core FLOPs", "inter_node": "inter-node (NIC) bandwidth"}


def slower(record: dict) -> bool:
    """Passed, but measurably slower than the reference: its noise band lies below 1.0 (without a
    band, its verdict is degraded or worse). A 0.99x whose band holds 1.0 is on par."""
    score = record.get("score")
    if score is None or score >= 1.0:
        return False
    band = record.get("band")
    if band and band[1] is not None:
        return band[1] < 1.0
    return (record.get("verdict") or tier(score)) in SLOW_TIERS


def speed_text(record: dict) -> str:
    score = record.get("score")
    if score is None:
        return "its speed was not measured"
    band = record.get("band")
    band_text = f" (noise band {band[0]:.2f}-{band[1]:.2f})" if band and band[0] is not None else ""
    verdict = record.get("verdict")
    if slower(record):
        how = "slower than the reference"
    elif score >= 1.0 and band and band[0] is not None and band[0] > 1.0:
        how = "faster than the reference"
    else:
        how = "on par with the reference (the rounds cannot tell it apart)"
    return f"{score:.2f}x the reference's speed{band_text}, geometric mean over sizes: {how}" + \
        (f" (verdict {verdict})" if verdict else "")


def timing_lines(record: dict) -> list[str]:
    lines = []
    for s in record.get("sizes") or []:
        t = s.get("timing") or {}
        ref, cand = (t.get("reference") or {}).get("median_s"), (t.get("candidate") or {}).get("median_s")
        if ref is None or cand is None:
            continue
        text = f"- size {s.get('name')}: reference {_t(ref)}, yours {_t(cand)}"
        sp, band = s.get("speedup"), s.get("band")
        if sp:
            text += f": {sp:.2f}x" + (f" (band {band[0]:.2f}-{band[1]:.2f})" if band and band[0] is not None else "")
        bound, roof = s.get("roof_bound"), s.get("roof_s")
        if bound and roof:
            frac = (s.get("roofline") or {}).get("candidate")
            text += f"; bound by {BOUND_TEXT.get(bound, bound)}, roofline {_t(roof)}"
            text += f" (yours reaches {frac:.0%} of it)" if frac else ""
        lines.append(text)
    return lines


def _t(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.3f} ms"


# ---- the feedback of one round ----------------------------------------------------------------------
def needs_refinement(record: dict, device: str) -> bool:
    """A round is refined when it failed, or passed measurably slower than the reference on a GPU
    (CPU times are gloo, not speed, so a passing CPU round is final)."""
    if record.get("outcome") != Outcome.PASSED:
        return record.get("outcome") == Outcome.FAILED
    return device == "cuda" and slower(record)


def cut_off(record: dict) -> bool:
    return ((record.get("llm") or {}).get("finish_reason") == "length"
            or "(unterminated: the answer was cut off)" in str((record.get("llm") or {}).get("extracted") or ""))


def body(record: dict, harness_text: str = "") -> tuple[str, str]:
    """(the cause, the evidence) of one round's record, cleaned and redacted."""
    outcome, failure = record.get("outcome"), record.get("failure")
    parts = []
    if outcome == Outcome.PASSED:
        head = f"Correct at every size and trial, at {speed_text(record)}."
    else:
        cause, rest, others = lead(clean(record.get("message") or ""), failure)
        head = f"Failed: {failure}." + (f" {cause}" if cause else "")
        if rest.strip():
            parts.append("Details:\n```\n" + clip(rest, EXCERPT_LINES, EXCERPT_CHARS) + "\n```")
        if others:
            label, text = others
            title = {"other ranks": "What the other ranks reported (most likely a consequence)",
                     "consequence": "What the rank reported that lost its peer (a consequence)"}.get(
                label, label[0].upper() + label[1:])
            parts.append(f"{title}:\n```\n" + clip(text.strip(), 8, 800) + "\n```")
    if cut_off(record):
        why = f", which is why it failed ({failure})" if outcome != Outcome.PASSED else ""
        head = CUT_OFF.format(why=why) + "\n\n" + head
    tail = record.get("log_tail")
    if tail and failure in SHOWS_LOG_TAIL:
        lines = [ln for ln in clean(tail).splitlines() if ln.strip()]
        if lines:
            parts.append("Last lines of the job's log:\n```\n" + clip("\n".join(lines[-LOG_LINES:]), LOG_LINES,
                                                                       EXCERPT_CHARS) + "\n```")
    timing = timing_lines(record)
    if timing:
        parts.append("Measured per size (median time per call, slowest rank), what bounds it and its roofline "
                     "time (latency-bound: cut launches and dependent steps; bandwidth-bound: move fewer bytes "
                     "or move them at full rate):\n" + "\n".join(timing))
    warnings = record.get("warnings") or []
    if warnings:
        parts.append("Warnings:\n" + "\n".join(f"- {clean(str(w))}" for w in warnings[:8]))
    return redact(head, harness_text), redact("\n\n".join(parts), harness_text)


def goal(record: dict) -> str:
    if record.get("outcome") == Outcome.PASSED:
        return "keep it correct and make it faster than the reference."
    if cut_off(record):
        return "a shorter module that is complete (the module must be correct at every size, trial and rank)."
    return "fix the failure (the module must be correct at every size, trial and rank)."


def clip(text: str, max_lines: int, max_chars: int) -> str:
    lines = text.splitlines()
    cut = len(lines) > max_lines
    text = "\n".join(lines[:max_lines])
    if len(text) > max_chars:
        text, cut = text[:max_chars], True
    return text + ("\n[... truncated]" if cut else "")


def harness_lines(harness_text: str, min_len: int = 12) -> set[str]:
    """The non-trivial lines of harness.py (stripped), which must never reach a model."""
    out = set()
    for ln in harness_text.splitlines():
        s = ln.strip()
        if len(s) < min_len or s.startswith(("import ", "from ", "#")) or s in ('"""', "'''"):
            continue
        out.add(s)
    return out


def redact(text: str, harness_text: str) -> str:
    """Drop every line that quotes harness.py (a traceback through it, say) and its file path."""
    if not harness_text:
        return text
    hidden = harness_lines(harness_text)
    out = []
    for ln in text.splitlines():
        s = ln.strip()
        if s and (s in hidden or any(h in ln for h in hidden if len(h) >= 25)):
            out.append(HIDDEN_LINE)
        else:
            out.append(re.sub(r'File "[^"]*harness\.py"', 'File "<hidden harness>"', ln))
    return "\n".join(out)
