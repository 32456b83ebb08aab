"""How the simulated model behaves: which fault or outcome a request gets, and the reply.

Pure: no HTTP, no clock, no state. The server passes in how often it has seen the
request (``hits``) and gets back decisions::

    fault = fault_for(config, scenario, hits=0)        # Fault("rate_limit", ...) or None
    reply = answer(config, scenario)                   # Reply(outcome="broken_json", ...)

A script entry ``{"call": [...]}`` makes the reply a set of client tool calls (outcome
``call``) when the request lets the model call those tools; otherwise the model answers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final, Literal

from reprompt_sim import chance, defect
from reprompt_sim.config import ANSWER_MODES, OK, SimConfig
from reprompt_sim.diagnosis import REFUSAL_TEXT, Diagnosis, examine
from reprompt_sim.directive import ScriptedCall, Step
from reprompt_sim.instance import valid_instance
from reprompt_sim.scenario import Scenario

Finish = Literal["stop", "length", "tool_use", "refusal"]
FaultKind = Literal["rate_limit", "server_error", "overloaded", "slow"]

CHARS_PER_TOKEN: Final = 4
_SENTENCES: Final = (
    "Let me think about this request carefully before answering.",
    "First, I will restate the task in my own words to make sure I understood it.",
    "The input contains several details, and each of them matters for the result.",
    "I will go through the fields one by one and check them against the text.",
    "Some values need a little interpretation, so I will explain my reasoning.",
    "It is worth double-checking the units and the spelling of every name.",
    "Now I am confident about the structure, so I will write the answer below.",
)
# When re-asked without configured failure rates, the model repeats the kind of mistake it made.
_REPEAT: Final[dict[str, str]] = {
    "refusal": "refusal",
    "syntax": "broken_json",
    "schema": "wrong_type",
    "semantic": "semantic",
    "incomplete": "truncation",
}


@dataclass(frozen=True, slots=True)
class Fault:
    """A transport-level failure. ``slow`` delays the answer; the others replace it."""

    kind: FaultKind
    retry_after_s: float = 0.0
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call, as each wire carries it.

    ``arguments`` is OpenAI's text. ``input`` is Anthropic's ``tool_use`` block: for the
    output tool the JSON object when ``arguments`` holds exactly one (else ``None``: the
    answer goes out as text); for a scripted call, the arguments as the script gave them.
    """

    id: str
    name: str
    arguments: str
    input: Any


@dataclass(frozen=True, slots=True)
class Reply:
    """The model's answer in wire-neutral form.

    ``outcome`` is "ok", the defect it carries, or "call" for scripted client tool
    ``calls`` (then ``tool_use``, the answer, is ``None``).
    """

    outcome: str
    attempt: int
    text: str | None
    tool_use: ToolUse | None
    refusal: str | None
    finish: Finish
    prompt_tokens: int
    output_tokens: int
    calls: tuple[ToolUse, ...] = ()


def tokens(chars: int) -> int:
    """The simulator's token estimate: ceil(chars / 4)."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def attempt_of(scenario: Scenario, answered_before: int) -> int:
    """The script position: per assistant message, or per answered request when asked to."""
    directive = scenario.directive
    if directive is not None and directive.counter == "requests":
        return answered_before + 1
    return scenario.conversation.attempt


def fault_for(config: SimConfig, scenario: Scenario, *, hits: int, attempt: int) -> Fault | None:
    """The transport fault for the ``hits``-th repeat of this exact conversation, if any."""
    directive = scenario.directive
    retry_after = config.retry_after_s
    if directive is not None and directive.retry_after_s is not None:
        retry_after = directive.retry_after_s
    step = directive.step(attempt) if directive is not None else None
    if directive is not None and directive.steps is not None:
        if step is None or hits >= len(step.faults):
            return None  # a script is exact: no random transport faults on top
        return _fault(step.faults[hits], config, retry_after)
    r = chance.roll(config.seed, scenario.conversation.digest, hits, "transport")
    kind = chance.pick_weighted(
        {
            "rate_limit": config.rate_limit_rate,
            "server_error": config.server_error_rate,
            "slow": config.slow_rate,
        },
        r,
    )
    if (
        kind == "server_error"
        and chance.roll(config.seed, scenario.conversation.digest, hits) < 0.5
    ):
        kind = "overloaded"
    return _fault(kind, config, retry_after) if kind is not None else None


def latency_s(config: SimConfig, scenario: Scenario, *, hits: int) -> float:
    """Base latency plus seeded jitter, in seconds."""
    jitter = (
        chance.roll(config.seed, scenario.conversation.digest, hits, "jitter") * config.jitter_ms
    )
    return (config.latency_ms + jitter) / 1000


def answer(
    config: SimConfig, scenario: Scenario, *, attempt: int | None = None, choice: int = 0
) -> Reply:
    """The model's reply to ``scenario``; ``attempt`` overrides the script position.

    ``choice`` numbers the answers of a request that asks for several (OpenAI's ``n``):
    the directive's ``choices`` name each one's outcome (on such requests only); without
    them, each later choice rolls its own chances (a script is exact: every choice follows
    it).
    """
    attempt = attempt if attempt is not None else scenario.conversation.attempt
    directive = scenario.directive
    step = directive.step(attempt) if directive is not None else None
    if step is not None and step.calls and (step.force or _callable(scenario, step)):
        return _calls(scenario, attempt, step)
    expected = expected_answer(config, scenario)
    salt: tuple[object, ...] = () if choice == 0 else ("choice", choice)
    named = directive.choices if directive is not None and scenario.n > 1 else None
    if named is not None and choice < len(named):
        outcome = named[choice]
    else:
        outcome = _outcome(config, scenario, attempt, expected, salt)
    return _compose(config, scenario, attempt, outcome, expected, salt)


def expected_answer(config: SimConfig, scenario: Scenario) -> Any:
    """The correct answer: the directive's ``expect``, else a valid instance of the schema."""
    directive = scenario.directive
    if directive is not None and directive.has_expect:
        return _pointed(directive.expect, scenario.schema)
    task = scenario.conversation.task
    if scenario.schema is not None:
        if scenario.schema_source == "tool" and not (
            scenario.schema.get("properties") or scenario.schema.get("type")
        ):
            return {}
        return valid_instance(scenario.schema, seed=config.seed, task=task)
    text = _plain_answer(task)
    return {"answer": text} if scenario.structured else text


def _pointed(expect: Any, schema: dict[str, Any] | None) -> Any:
    """The expected answer, or the parts of it a field-level re-ask asks for.

    Such a schema's property names are JSON Pointers (they start with "/").
    """
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or not properties:
        return expect
    if not all(isinstance(k, str) and k.startswith("/") for k in properties):
        return expect
    parts: dict[str, Any] = {}
    for key in properties:
        node = expect
        for raw in key[1:].split("/"):
            step = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and step in node:
                node = node[step]
            elif isinstance(node, list) and step.isdigit() and int(step) < len(node):
                node = node[int(step)]
            else:
                break
        else:
            parts[key] = node
    return parts


def _outcome(
    config: SimConfig,
    scenario: Scenario,
    attempt: int,
    expected: Any,
    salt: tuple[object, ...] = (),
) -> str:
    directive = scenario.directive
    if directive is not None:
        step = directive.step(attempt)
        if step is not None:
            return step.outcome
        if directive.steps is not None:
            return OK  # the script ran out: answer correctly
    rates = dict(config.failure_rates)
    if directive is not None and directive.failure_rates is not None:
        rates = dict(directive.failure_rates)
    convo = scenario.conversation
    previous = convo.previous_answer
    if previous is None:
        first = chance.roll(config.seed, convo.digest, "first", *salt)
        return chance.pick_weighted(rates, first) or OK
    diagnosis = examine(
        previous, expected=expected, schema=scenario.schema, structured=scenario.structured
    )
    if diagnosis.defect == "none":
        return OK
    if chance.roll(config.seed, convo.digest, "fix", *salt) < _fix_probability(
        config, scenario, diagnosis
    ):
        return OK
    key = chance.digest(convo.digest, *salt) if salt else convo.digest
    return _fresh_failure(config, key, rates, diagnosis)


def _fix_probability(config: SimConfig, scenario: Scenario, diagnosis: Diagnosis) -> float:
    directive = scenario.directive
    if diagnosis.named_in(scenario.conversation.feedback):
        if directive is not None and directive.fix_probability is not None:
            return directive.fix_probability
        return config.fix_probability
    if directive is not None and directive.blind_fix_probability is not None:
        return directive.blind_fix_probability
    return config.blind_fix_probability


def _fresh_failure(
    config: SimConfig, digest: str, rates: dict[str, float], diagnosis: Diagnosis
) -> str:
    total = sum(rates.values())
    if total <= 0:
        return _REPEAT.get(diagnosis.defect, "broken_json")
    r = chance.roll(config.seed, digest, "again") * total
    return chance.pick_weighted(rates, r) or next(m for m in ANSWER_MODES if rates.get(m))


def _compose(
    config: SimConfig,
    scenario: Scenario,
    attempt: int,
    outcome: str,
    expected: Any,
    salt: tuple[object, ...] = (),
) -> Reply:
    rnd = chance.rng(config.seed, "defect", scenario.conversation.digest, *salt)
    prompt_tokens = tokens(scenario.prompt_chars)
    if outcome == "refusal":
        return Reply(
            outcome, attempt, None, None, REFUSAL_TEXT, "refusal", prompt_tokens,
            tokens(len(REFUSAL_TEXT)),
        )  # fmt: skip
    compact = scenario.tool_name is not None
    if not scenario.structured:
        draft = defect.Draft(str(expected), OK)
        outcome = outcome if outcome == "truncation" else OK
    elif outcome in (OK, "truncation"):
        draft = defect.correct(expected, compact=compact)
    else:
        draft = defect.inject(outcome, expected, scenario.schema, rnd, compact=compact)
        outcome = draft.mode
    preamble = _preamble(config, scenario) if outcome == "truncation" else ""
    tool_use: ToolUse | None = None
    if scenario.tool_name is not None:
        value = draft.value if draft.is_json and isinstance(draft.value, dict) else None
        call_id = chance.digest(scenario.conversation.digest, "call")[:24]
        tool_use = ToolUse(call_id, scenario.tool_name, draft.text, value)
        text = preamble or None
    else:
        text = f"{preamble}\n\n{draft.text}" if preamble else draft.text
    written = len(text or "") + (len(tool_use.arguments) if tool_use else 0)
    limit = scenario.max_tokens
    if limit is not None and tokens(written) > limit:
        whole = "\n\n".join(p for p in (text, tool_use.arguments if tool_use else None) if p)
        cut = whole[: limit * CHARS_PER_TOKEN]
        return Reply(
            "truncation", attempt, cut, None, None, "length", prompt_tokens, tokens(len(cut))
        )
    finish: Finish = "tool_use" if tool_use is not None else "stop"
    return Reply(outcome, attempt, text, tool_use, None, finish, prompt_tokens, tokens(written))


def _callable(scenario: Scenario, step: Step) -> bool:
    """All or nothing: a model that cannot call one of the tools gives its answer instead."""
    return all(scenario.can_call(call.name) for call in step.calls)


def _calls(scenario: Scenario, attempt: int, step: Step) -> Reply:
    # Ids are unique within a conversation because the attempt grows with every tool round.
    uses = tuple(_tool_use(f"{attempt}_{n}", call) for n, call in enumerate(step.calls, 1))
    written = len(step.text or "") + sum(len(u.name) + len(u.arguments) for u in uses)
    return Reply(
        "call", attempt, step.text, None, None, "tool_use", tokens(scenario.prompt_chars),
        tokens(written), uses,
    )  # fmt: skip


def _tool_use(call_id: str, call: ScriptedCall) -> ToolUse:
    if call.raw:
        return ToolUse(call_id, call.name, call.arguments, call.arguments)
    arguments = json.dumps(call.arguments, separators=(",", ":"), ensure_ascii=False)
    return ToolUse(call_id, call.name, arguments, call.arguments)


def _preamble(config: SimConfig, scenario: Scenario) -> str:
    """A verbose, brace-free lead-in of about ``verbose_tokens`` tokens."""
    rnd = chance.rng(config.seed, "preamble", scenario.conversation.task)
    target = config.verbose_tokens * CHARS_PER_TOKEN
    sentences: list[str] = []
    size = 0
    while size < target:
        sentence = rnd.choice(_SENTENCES)
        sentences.append(sentence)
        size += len(sentence) + 1
    return " ".join(sentences)


def _plain_answer(task: str) -> str:
    gist = " ".join(task.split())[:160] or "your request"
    return f"Here is my answer to: {gist}"


def _fault(kind: str, config: SimConfig, retry_after_s: float) -> Fault:
    if kind == "rate_limit":
        return Fault("rate_limit", retry_after_s=retry_after_s)
    if kind == "slow":
        return Fault("slow", delay_s=config.slow_ms / 1000)
    if kind == "overloaded":
        return Fault("overloaded", retry_after_s=retry_after_s)
    return Fault("server_error")
