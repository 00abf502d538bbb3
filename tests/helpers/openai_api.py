"""What the OpenAI-compatible server and client tests share: the model name, a request with a tool, a recording scripted backend, a canned reply and error responses."""

from __future__ import annotations

from aiohttp import web

from agentgym.rollout.policy import SamplingParams
from tests.helpers.scripted import ScriptedPolicy

MODEL = "tiny"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "List the files."}]
CALL_REPLY = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls -la"}}\n</tool_call>'


class RecordingPolicy(ScriptedPolicy):
    """The scripted backend (fixed replies, real tokenizer), also recording sampling params; logprobs differ per position so misalignment shows."""

    def __init__(self, replies, **kwargs):
        super().__init__(replies, **kwargs)
        self.samplings: list[SamplingParams] = []

    async def generate(self, prompt_ids, sampling):
        self.samplings.append(sampling)
        completion = await super().generate(prompt_ids, sampling)
        completion.logprobs = [-0.1 * (i + 1) for i in range(len(completion.token_ids))]
        return completion


REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": MODEL,
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop", "logprobs": None}
    ],
}


def error(status: int, message: str = "nope") -> web.Response:
    return web.json_response({"error": {"message": message, "type": "x", "param": None, "code": None}}, status=status)
