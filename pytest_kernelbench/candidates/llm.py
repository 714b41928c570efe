"""Candidates written by a model through litellm: prompt, cache, call (retries, timeouts, cost,
budget), extraction. One ModelSource per item; test_problem drives samples and rounds with it.

litellm is imported only here, only when a call is about to be made (the GPU machine has no
litellm, and a run without --kb-model must never need it), with the offline price map
(LITELLM_LOCAL_MODEL_COST_MAP) so that importing it never fetches anything.

What a run keeps (under reports/<run-id>/, the session's run_dir):
  prompts/<problem>-s<k>-r<r>.md      every chat sent (or that would be sent: --kb-print-prompt)
  answers/<problem>-s<k>-r<r>.md      every answer (cached or fresh)
  candidates/<problem>-s<k>-r<r>.py   every extracted module
  llm-ledger.json                     spend, tokens and calls of the whole run; the budget and a
                                      failed authentication are shared through it (filelock), so
                                      xdist workers stop together
"""
from __future__ import annotations

import importlib.util
import os
import random
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any


from ..protocol import Failure
from ..spec import shapes
from . import Candidate, prompt
from .cache import GenerationCache
from .cache import key as cache_key
from .cache import lineage as cache_lineage
from .extract import extract, extract_native
from .files import python_syntax
from .spend import Ledger, Skipped, cost_of  # noqa: F401 (llm.Skipped, llm.cost_of: what callers name)

if TYPE_CHECKING:
    from ..options import Settings
    from ..spec.problem import Placement, Problem

MAX_BACKOFF_S = 120.0
FATAL_STATUS = {401: "authentication failed", 403: "permission denied", 404: "model not found"}
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


class ApiFailure(Exception):
    """The API did not give an answer; .message is one clear paragraph, .info what was tried."""

    def __init__(self, message: str, info: dict, fatal: bool = False):
        super().__init__(message)
        self.message = message
        self.info = info
        self.fatal = fatal


def available() -> bool:
    return importlib.util.find_spec("litellm") is not None


# the key variables litellm reads for the common providers: checked without importing litellm
# (seconds of start-up on a loaded machine); any other provider is asked of litellm itself
PROVIDER_KEYS = {"openai": ("OPENAI_API_KEY",), "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
                 "gemini": ("GEMINI_API_KEY",), "deepseek": ("DEEPSEEK_API_KEY",), "xai": ("XAI_API_KEY",),
                 "openrouter": ("OPENROUTER_API_KEY",), "mistral": ("MISTRAL_API_KEY",), "groq": ("GROQ_API_KEY",)}


def preflight(model: str, api_base: str | None = None) -> str | None:
    """Why `model` cannot be called at all, checked before any item runs (a missing key used to
    cost every item a minute of retries): an unknown provider, the provider's key missing from the
    environment, or --kb-api-base's server not accepting a connection. None when it looks callable."""
    problem = _key_problem(model, api_base)
    if problem is None and api_base:
        down = unreachable(api_base)
        if down:
            problem = (f"--kb-api-base={api_base}: {down}; start the model server or fix the address "
                       "(every item would wait out its retries)")
    return problem


def _key_problem(model: str, api_base: str | None) -> str | None:
    provider = model.split("/", 1)[0] if "/" in model else None
    if provider in PROVIDER_KEYS:
        keys = PROVIDER_KEYS[provider]
        if any(os.environ.get(k) for k in keys):
            return None
        local = " (for a local OpenAI-compatible server, any value works)" if api_base else ""
        return f"--kb-model={model}: {keys[0]} is not set in the environment; export {keys[0]}=...{local}"
    litellm = litellm_module()
    try:
        litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception as e:  # noqa: BLE001 - litellm raises its own BadRequestError
        return (f"--kb-model={model}: litellm knows no provider for this name ({_first_line(e)[:160]}); "
                "write it as provider/model, e.g. openai/gpt-5 or anthropic/claude-opus-4-7")
    try:
        env = litellm.validate_environment(model=model, api_base=api_base)
    except Exception:  # noqa: BLE001 - no verdict: the first call will tell
        return None
    missing = [k for k in env.get("missing_keys") or [] if k]
    if not env.get("keys_in_environment", True) and missing:
        local = " (for a local OpenAI-compatible server, any value works)" if api_base else ""
        return (f"--kb-model={model}: {', '.join(missing)} is not set in the environment; "
                f"export {missing[0]}=...{local}")
    return None


PROBE_TIMEOUT_S = 3.0


def unreachable(api_base: str, refused_only: bool = False) -> str | None:
    """Why nothing answers at `api_base`'s host and port (a refused connection is known at once:
    a local model server that is down cost every item its retries), or None when a TCP connection
    opens (`refused_only`: None too when the host could not be reached, which may pass). Only the
    connection is tried: no request, no key sent."""
    url = urllib.parse.urlsplit(api_base if "://" in api_base else f"http://{api_base}")
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError as e:
        return f"not a URL ({e})"
    if not url.hostname:
        return "not a URL (no host)"
    try:
        socket.create_connection((url.hostname, port), timeout=PROBE_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return f"nothing listens at {url.hostname}:{port} (connection refused)"
    except OSError as e:     # no such host, no route, no answer within the probe's time
        if refused_only:
            return None
        return f"cannot connect to {url.hostname}:{port} ({e.strerror or type(e).__name__})"
    return None


# an API error whose text says the credentials are wrong or missing is an authentication failure,
# whatever HTTP status the provider (or litellm) put on it (a missing OpenAI key came as a 500)
CREDENTIALS = re.compile(r"missing credentials|api[ _-]?key|authenticat|unauthori[sz]ed|invalid[ _-]?(?:x-)?api|"
                         r"permission denied|incorrect api key", re.I)
def litellm_module():
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm
    litellm.suppress_debug_info = True
    return litellm


def backoff_base() -> float:
    try:
        return float(os.environ.get("KB_LLM_BACKOFF_S", "2"))
    except ValueError:
        return 2.0


def usd_of(model: str, prompt_tokens: int, completion_tokens: int, response: Any = None) -> float | None:
    """USD of one call from litellm's bundled price map; None where it knows no price."""
    litellm = litellm_module()
    try:
        p, c = litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        return float(p) + float(c)
    except Exception:
        pass
    try:
        cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
        return float(cost) if cost is not None else None
    except (TypeError, ValueError):
        return None


def price_known(model: str) -> bool:
    return usd_of(model, 1000, 1000) is not None


# ---- one item's source of candidates ------------------------------------------------------------------
@dataclass
class Round:
    """What one round produced and how it ended: the input of the next round's prompt."""
    candidate: Candidate
    answer: str
    record: dict


def cache_root(settings: Settings, rootdir: Path) -> Path:
    """The cache of generations and prompt facts (--kb-cache-dir, relative to the rootdir)."""
    d = settings.cache_dir
    if d:
        p = Path(d)
        return p if p.is_absolute() else Path(rootdir) / p
    return Path(rootdir) / ".kb-cache"


def slug(problem: Problem) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", problem.id).strip("-")


class ModelSource:
    """Generates the candidates of one item (a problem at a placement) for --kb-model."""
    kind = "llm"

    def __init__(self, settings: Settings, rootdir: Path, run_dir: Path, machine: dict, problem: Problem,
                 placement: Placement) -> None:
        s = self.settings = settings
        self.run_dir = Path(run_dir)
        self.problem = problem
        self.placement = placement
        self.model = s.model
        self.params = {k: v for k, v in (("temperature", s.temperature), ("max_tokens", s.max_tokens)) if v is not None}
        root = cache_root(s, rootdir)
        self.cache = GenerationCache(root / "generations")
        self.ledger = Ledger(self.run_dir, s.max_cost)
        probed = shapes.probe(problem, placement.world_size, root / "shapes")
        # the budgets the prompt states are this run's (--kb-compile-timeout, --kb-timeout)
        self.first = prompt.messages(problem, placement, machine, probed, s.compile_timeout, s.timeout)
        self.first_digest = prompt.digest(self.first)
        self.harness_text = problem.harness_path.read_text()
        self.slug = slug(problem)
        # native problems: the answer is C++/CUDA (the whole template or its EDIT regions)
        self.native = problem.kind_spec.language != "python"
        self.suffix = problem.kind_spec.suffix(problem.template)

    # -- files of the run ------------------------------------------------------------------
    def _file(self, what: str, stem: str, suffix: str, text: str) -> Path:
        path = self.run_dir / what / f"{stem}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def write_prompt(self) -> Path:
        """--kb-print-prompt: the first round's chat, nothing called."""
        return self._file("prompts", self.slug, ".md", prompt.render(self.first))

    def messages(self, history: list[Round]) -> list[dict]:
        if not history:
            return self.first
        shown = [(r.candidate.source or _clip_answer(r.answer), r.record) for r in history]
        return prompt.refine_messages(self.first, shown, self.harness_text, self.placement.device,
                                      native=self.problem if self.native else None,
                                      rounds=self.settings.rounds)

    # -- one generation ----------------------------------------------------------------------
    def generate(self, sample: int, round_no: int, history: list[Round]) -> tuple[Candidate, str, dict]:
        """(candidate, answer text, call record). Raises Skipped or ApiFailure."""
        s = self.settings
        msgs = self.messages(history)
        digest = prompt.digest(msgs)
        k = cache_key(self.model, digest, self.params, sample, round_no)
        trail = [(r.candidate.sha256, r.record.get("outcome"), r.record.get("failure")) for r in history]
        lin = cache_lineage(self.model, self.first_digest, self.params, sample, round_no, trail)
        stem = f"{self.slug}-s{sample}-r{round_no}"
        prompt_path = self._file("prompts", stem, ".md", prompt.render(msgs))
        call = {"model": self.model, "sample": sample, "round": round_no, "prompt_sha256": digest,
                "cache_key": k, "prompt_file": str(prompt_path), **self.params}
        with self.cache.locked(k):
            entry, how = (None, None) if s.regenerate else self.cache.get(k, lin)
            if entry is None:
                self.ledger.check(self.model)
                entry = self._call(msgs, call)
                self.ledger.charge(entry.get("usd"), entry.get("prompt_tokens"), entry.get("completion_tokens"))
                self.cache.put(k, {**entry, "model": self.model, "params": self.params, "sample": sample,
                                   "round": round_no, "prompt_sha256": digest}, lin)
                call["cached"] = False
            else:
                call["cached"] = how
        answer = entry.get("answer") or ""
        call.update({f: entry.get(f) for f in ("prompt_tokens", "completion_tokens", "usd", "finish_reason",
                                               "latency_s", "attempts", "errors")})
        call["answer_file"] = str(self._file("answers", stem, ".md", answer))
        source, how_found = extract_native(answer) if self.native else extract(answer)
        call["extracted"] = how_found
        label = f"llm:{self.model}"
        meta = {"model": self.model, "sample": sample, "round": round_no, "extracted": how_found}
        if source is None:
            note = " (the answer hit the token limit)" if entry.get("finish_reason") == "length" else ""
            start = " ".join(answer.split())[:160]
            cand = Candidate("llm", label, None, origin=call["answer_file"], meta=meta,
                             failure=(Failure.NO_CODE, f"{how_found}{note}; it begins: {start!r}"))
        else:
            path = self._file("candidates", stem, self.suffix, source)
            bad = None if self.native else python_syntax(source, path)
            if bad and entry.get("finish_reason") == "length":
                bad = (bad[0], bad[1] + "\n(the answer was cut off at the token limit: write shorter code)")
            cand = Candidate("llm", label, source, origin=str(path), meta=meta, failure=bad)
        return cand, answer, call

    def _call(self, msgs: list[dict], call: dict) -> dict:
        s = self.settings
        litellm = litellm_module()
        if s.max_cost is not None and not price_known(self.model):
            msg = (f"--kb-max-cost needs a price for {self.model}, and litellm's offline price map has none; "
                   f"drop --kb-max-cost or use a model litellm knows")
            self.ledger.mark_fatal(self.model, "no price for the budget")
            raise ApiFailure(msg, {"attempts": 0, "errors": []}, fatal=True)
        kwargs = dict(model=self.model, messages=msgs, timeout=s.request_timeout, max_retries=0, num_retries=0,
                      **self.params)
        if s.api_base:
            kwargs["api_base"] = s.api_base
        errors = []
        retries = max(0, s.retries)
        for attempt in range(retries + 1):
            t0 = time.monotonic()
            try:
                resp = litellm.completion(**kwargs)
            except Exception as e:  # noqa: BLE001 - classified below, never swallowed silently
                status = getattr(e, "status_code", None)
                line = _first_line(e)
                errors.append({"attempt": attempt + 1, "status": status, "error": type(e).__name__, "message": line,
                               "after_s": round(time.monotonic() - t0, 3)})
                info = {"attempts": attempt + 1, "errors": errors}
                if status in FATAL_STATUS or CREDENTIALS.search(line):
                    what = FATAL_STATUS.get(status or 0, "authentication failed") + (f" (HTTP {status})" if status else "")
                    self.ledger.mark_fatal(self.model, what)
                    raise ApiFailure(
                        f"{self.model}: {what}: {line}. Check the provider's API key (e.g. OPENAI_API_KEY, "
                        f"ANTHROPIC_API_KEY), the model name and --kb-api-base. The remaining items of this model "
                        f"are skipped.", info, fatal=True) from None
                # the server went away (litellm reports a refused connection as HTTP 500 "Connection
                # error"): no item of this model gets an answer now, and retries only wait
                down = s.api_base and unreachable(s.api_base, refused_only=True)
                if down:
                    self.ledger.mark_fatal(self.model, f"--kb-api-base {down}")
                    raise ApiFailure(f"{self.model}: --kb-api-base={s.api_base}: {down}: {line}. The remaining "
                                     "items of this model are skipped.", info, fatal=True) from None
                timeout = isinstance(e, litellm.Timeout)
                retryable = timeout or isinstance(e, litellm.APIConnectionError) or status in RETRY_STATUS
                if not retryable or attempt == retries:
                    why = (f"no answer within --kb-request-timeout={s.request_timeout:g}s" if timeout
                           else f"{type(e).__name__}" + (f" (HTTP {status})" if status else ""))
                    tries = f" after {attempt + 1} attempts" if attempt else ""
                    raise ApiFailure(f"{self.model}: {why}{tries}: {line}", info) from None
                time.sleep(_delay(e, attempt))
                continue
            usage = getattr(resp, "usage", None)
            pt = int(getattr(usage, "prompt_tokens", 0) or 0)
            ct = int(getattr(usage, "completion_tokens", 0) or 0)
            choice = resp.choices[0]
            content = getattr(choice.message, "content", None) or ""
            return {"answer": content, "finish_reason": getattr(choice, "finish_reason", None),
                    "prompt_tokens": pt, "completion_tokens": ct, "usd": usd_of(self.model, pt, ct, resp),
                    "latency_s": round(time.monotonic() - t0, 3), "attempts": attempt + 1, "errors": errors,
                    "response_model": getattr(resp, "model", None)}
        raise AssertionError("unreachable")


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    line = text.splitlines()[0]
    return line[:400]


def _delay(e: Exception, attempt: int) -> float:
    retry_after = None
    try:
        headers = getattr(getattr(e, "response", None), "headers", None) or {}
        value = headers.get("retry-after")
        retry_after = float(value) if value is not None else None
    except (TypeError, ValueError):
        retry_after = None
    if retry_after is not None:
        return min(max(retry_after, 0.0), MAX_BACKOFF_S)
    base = backoff_base()
    return min(base * (2 ** attempt), MAX_BACKOFF_S) * (1 + 0.25 * random.random())


def _clip_answer(answer: str, limit: int = 1500) -> str:
    answer = (answer or "").strip()
    return answer if len(answer) <= limit else answer[:limit] + "\n[... truncated]"
