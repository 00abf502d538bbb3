"""Agent programs as users write them, for the gateway's tests: one on the `openai` client (+ the `mcp` client for the
env's tools), one on the OpenAI Agents SDK (`openai-agents`), one on smolagents, and a two-turn chat on the `openai`
client. None knows agentgym: each takes a base URL, an API key, an MCP URL and a goal. Also the scripted backends' reply functions that solve KeyChain and HumanEval/0 (they stand in
for a model that can solve them; the tiny model cannot).

`python -m tests.helpers.gateway_programs` runs the openai-client agent as a command program (its settings from the
environment, as any OpenAI program reads them: OPENAI_BASE_URL, OPENAI_API_KEY) and prints its answer last.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable

from agentgym.envs.code.humaneval import SOLUTION_PATH, load_problems
from agentgym.envs.tool.keychain import KEYS
from agentgym.task import call_text

MAX_STEPS = 8
DONE = "I submitted the answer."  # the scripted reply once the task is submitted


def _tool_responses(prompt: str) -> list[str]:
    # Tool results as the chat template wraps them, or as smolagents sends them (a user turn "Observation:\n...").
    blocks = re.findall(
        r"<tool_response>(.*?)</tool_response>|<\|im_start\|>user\nObservation:\n(.*?)<\|im_end\|>", prompt, re.S
    )
    return ["".join(block) for block in blocks]


def _last_tool_response(prompt: str) -> str | None:
    responses = _tool_responses(prompt)
    return responses[-1] if responses else None


def keychain_replies(prompt: str) -> str:
    """KeyChain solved: look up the start key, follow `see "key"` entries, submit the number; then stop."""
    response = _last_tool_response(prompt)
    if response is None:
        start = re.findall(r'stored under \\?"(\w+)', prompt)[-1]
        return call_text("lookup", {"key": start})
    pointer = re.search(r'see \\*"(\w+)', response)
    if pointer:
        return call_text("lookup", {"key": pointer.group(1)})
    number = re.search(rf"\b(?:{'|'.join(KEYS)}): (\d+)", response)
    if number:
        return call_text("submit", {"answer": number.group(1)})
    return DONE


def humaneval_replies(prompt: str) -> str:
    """HumanEval/0 solved with its canonical solution: write it, submit, stop."""
    responses = _tool_responses(prompt)
    if not responses:
        problem = load_problems()["HumanEval/0"]
        return call_text(
            "write_file", {"path": SOLUTION_PATH, "content": problem["prompt"] + problem["canonical_solution"]}
        )
    if len(responses) == 1:
        return call_text("submit")
    return DONE


def for_smolagents(replies: Callable[[str], str]) -> Callable[[str], str]:
    """``replies`` ending with smolagents' ``final_answer`` tool: its agent stops on that call and on no text reply."""

    def reply(prompt: str) -> str:
        text = replies(prompt)
        return call_text("final_answer", {"answer": text}) if text == DONE else text

    return reply


async def openai_agent(base_url: str, api_key: str, mcp_url: str, goal: str, model: str = "policy") -> str | None:
    """A plain tool loop on the `openai` client, its tools from an MCP server; returns its final text."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client
    from openai import AsyncOpenAI

    async with (
        AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client,
        create_mcp_http_client(headers={"Authorization": f"Bearer {api_key}"}) as http,
        streamable_http_client(mcp_url, http_client=http) as (read, write),
        ClientSession(read, write) as mcp_session,
    ):
        await mcp_session.initialize()
        listed = await mcp_session.list_tools()
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
            }
            for t in listed.tools
        ]
        messages: list[dict] = [{"role": "user", "content": goal}]
        for _ in range(MAX_STEPS):
            reply = await client.chat.completions.create(model=model, messages=messages, tools=tools, max_tokens=1024)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content
            for call in message.tool_calls:
                try:
                    arguments = json.loads(call.function.arguments)
                except ValueError:
                    arguments = {}
                result = await mcp_session.call_tool(call.function.name, arguments)
                text = "".join(getattr(part, "text", "") for part in result.content)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    return None


async def agents_sdk_agent(base_url: str, api_key: str, mcp_url: str, goal: str, model: str = "policy") -> str | None:
    """An OpenAI Agents SDK agent (Responses API model, the MCP server's tools); returns its final output."""
    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no trace export (it would go to api.openai.com)
    async with (
        AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0) as client,
        MCPServerStreamableHttp(
            {"url": mcp_url, "headers": {"Authorization": f"Bearer {api_key}"}}, cache_tools_list=True
        ) as server,
    ):
        agent = Agent(
            name="solver",
            instructions="Use the tools to solve the task.",
            model=OpenAIResponsesModel(model=model, openai_client=client),
            mcp_servers=[server],
        )
        result = await Runner.run(agent, goal, max_turns=MAX_STEPS)
        return result.final_output


def smolagents_agent(base_url: str, api_key: str, mcp_url: str, goal: str, model: str = "policy") -> str | None:
    """A smolagents ``ToolCallingAgent`` on its OpenAI model class, the MCP server's tools; returns its final answer.

    Its tools are smolagents ``Tool``s that call the MCP server (:func:`_smolagents_mcp_tools`), not smolagents'
    ``MCPClient``: that needs ``mcpadapt``, whose last release for Python 3.11 (0.1.19) imports a name ``mcp`` 2.x
    dropped (``streamablehttp_client``).
    """
    from smolagents import OpenAIServerModel, ToolCallingAgent

    llm = OpenAIServerModel(model_id=model, api_base=base_url, api_key=api_key, client_kwargs={"max_retries": 0})
    agent = ToolCallingAgent(
        tools=_smolagents_mcp_tools(mcp_url, api_key), model=llm, max_steps=MAX_STEPS, verbosity_level=0
    )
    answer = agent.run(goal)
    return None if answer is None else str(answer)


def _smolagents_mcp_tools(mcp_url: str, api_key: str) -> list:
    """The MCP server's tools as smolagents ``Tool``s (JSON-RPC ``tools/list`` and ``tools/call`` over HTTP)."""
    import httpx
    from smolagents import Tool

    def rpc(method: str, params: dict) -> dict:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer = httpx.post(mcp_url, json=message, headers={"Authorization": f"Bearer {api_key}"}, timeout=60)
        answer.raise_for_status()
        return answer.json()["result"]

    class MCPTool(Tool):
        output_type = "string"
        skip_forward_signature_validation = True  # its arguments are the MCP tool's, known at run time

        def forward(self, **arguments):
            result = rpc("tools/call", {"name": self.name, "arguments": arguments})
            return "".join(part.get("text", "") for part in result["content"])

    tools = []
    for spec in rpc("tools/list", {})["tools"]:
        schema = spec.get("inputSchema") or {}
        required = set(schema.get("required", ()))
        inputs = {
            name: {
                "type": prop.get("type", "any"),
                "description": prop.get("description", name),
                **({} if name in required else {"nullable": True}),
            }
            for name, prop in schema.get("properties", {}).items()
        }
        attributes = {"name": spec["name"], "description": spec.get("description") or spec["name"], "inputs": inputs}
        tools.append(type(f"MCPTool_{spec['name']}", (MCPTool,), attributes)())
    return tools


async def chat_program(context) -> str:
    """A program on the plain `openai` client that knows nothing of agentgym: two turns of one conversation."""
    from openai import AsyncOpenAI

    async with AsyncOpenAI(base_url=context.base_url, api_key=context.api_key, max_retries=0) as client:
        messages = [{"role": "user", "content": context.goal}]
        for follow_up in ("Go on.", None):
            reply = await client.chat.completions.create(model=context.model, messages=messages, max_tokens=12)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            if follow_up:
                messages.append({"role": "user", "content": follow_up})
        return reply.choices[0].message.content


async def openai_program(context) -> str | None:
    """:func:`openai_agent` as a gateway program (a callable taking a ProgramContext)."""
    return await openai_agent(context.base_url, context.api_key, context.mcp_url, context.goal, context.model)


async def agents_sdk_program(context) -> str | None:
    """:func:`agents_sdk_agent` as a gateway program."""
    return await agents_sdk_agent(context.base_url, context.api_key, context.mcp_url, context.goal, context.model)


def smolagents_program(context) -> str | None:
    """:func:`smolagents_agent` as a gateway program (sync: smolagents runs its own loop)."""
    return smolagents_agent(context.base_url, context.api_key, context.mcp_url, context.goal, context.model)


def main() -> None:
    answer = asyncio.run(
        openai_agent(
            os.environ["OPENAI_BASE_URL"],
            os.environ["OPENAI_API_KEY"],
            os.environ["AGENTGYM_MCP_URL"],
            os.environ["AGENTGYM_GOAL"],
            os.environ.get("AGENTGYM_MODEL", "policy"),
        )
    )
    print(answer or "")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
