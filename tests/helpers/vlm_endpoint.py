"""A stand-in for a hosted vision-language endpoint in tests: it records every chat request and answers with scripted tool calls.

No vision model can be downloaded here, so tests of what reaches a VLM endpoint run the real
``openai`` client against this small aiohttp server instead: it records each request body as
sent and answers ``replies[k]`` to a conversation with k assistant turns, as native tool calls when
the request carries tools, else as ``<tool_call>`` text. ``refuse(body)`` may answer an error
instead, as real endpoints do (HTTP 413 for large images, 400 for a text-only model).
"""

from __future__ import annotations

import base64
import json

from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.helpers.tool_calls import call

TEXT_ONLY_MODEL = "Qwen2ForCausalLM does not support multimodal inputs"  # what vLLM answers a text model given images


class RecordingVLM:
    """The stand-in endpoint: replies[k] answers a conversation with k assistant turns; ``refuse(body)`` may answer an error."""

    def __init__(self, replies: list[list[dict]], refuse=None):
        self.replies = replies
        self.refuse = refuse
        self.requests: list[dict] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if self.refuse is not None and (error := self.refuse(body)) is not None:
            status, message = error
            return web.json_response({"error": {"message": message, "type": "BadRequestError"}}, status=status)
        calls = self.replies[min(sum(m["role"] == "assistant" for m in body["messages"]), len(self.replies) - 1)]
        if "tools" not in body:  # tools described in the prompt: calls written out as text
            message = {"role": "assistant", "content": "".join(call(name, **args) for name, args in calls)}
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for i, (name, args) in enumerate(calls)
                ],
            }
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            }
        )

    async def start(self) -> TestServer:
        """Serve on a loopback port (the caller closes the returned server); sets :attr:`base_url`."""
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/chat/completions", self.handle)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        self.base_url = f"http://127.0.0.1:{server.port}/v1"
        return server


def images_in(message: dict) -> list[bytes]:
    """The bytes of the images a request message carries, in order."""
    content = message["content"]
    return [
        base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
        for part in (content if isinstance(content, list) else [])
        if part["type"] == "image_url"
    ]
