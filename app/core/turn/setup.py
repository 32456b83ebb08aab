"""A run's fixed part, built once before its first turn: spec, runtime, contract, prompts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.core.answer.contract import Contract, build_contract
from app.core.answer.validators import Hooks
from app.core.turn.budget import Limits
from app.core.turn.model import ToolSpec
from app.core.turn.prompting import Prompting
from app.core.turn.runtime import Runtime
from app.core.turn.tools import Tool, Toolbox
from app.core.wire.errors import InvalidInput
from app.core.wire.spec import JobSpec


@dataclass(frozen=True, slots=True)
class Setup:
    spec: JobSpec
    runtime: Runtime
    limits: Limits
    tools: Toolbox
    contract: Contract
    prompts: Prompting

    @classmethod
    def build(cls, spec: JobSpec, runtime: Runtime, limits: Limits, hooks: Hooks) -> Setup:
        """``InvalidInput`` for a job this runtime cannot run (e.g. an HTTP tool, no client)."""
        tools = Toolbox(job_tools(spec, runtime.tools))
        contract = build_contract(spec, runtime.validators, hooks=hooks)
        prompts = Prompting(spec, contract, runtime.client, has_tools=bool(tools))
        return cls(spec, runtime, limits, tools, contract, prompts)


def job_tools(spec: JobSpec, given: Sequence[Tool]) -> list[Tool]:
    """The runtime's tools, then the job's own client tools.

    A job's tool with a url needs a handler from the runtime (the worker's HTTP tools).
    """
    tools = list(given)
    names = {tool.spec.name for tool in tools}
    for tool in spec.tools:
        if tool.name in names:
            continue
        if not tool.client_side:
            raise InvalidInput(
                f"the tool {tool.name!r} has a url, and no HTTP tool client is configured here",
                field="tools",
            )
        tools.append(
            Tool(ToolSpec(tool.name, tool.description, tool.parameters), None, mode="client")
        )
    return tools
