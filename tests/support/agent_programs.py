"""Agent programs the agent tests train and break: each is what a user would write against the
OpenAI SDK, pointed at rlf's endpoint by ``client`` (``agent.entry``) or by the environment
(``agent.command``)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


def add(arguments: str) -> str:
    args = json.loads(arguments)
    return str(int(args["a"]) + int(args["b"]))


async def sdk_agent(task: dict[str, Any], client: Any) -> str | None:
    """A hand-written tool loop on the OpenAI SDK, as its documentation shows one."""
    messages: list[Any] = list(task["messages"])
    for _ in range(4):
        reply = await client.chat.completions.create(model="policy", messages=messages, tools=[ADD])
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content  # type: ignore[no-any-return]
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": add(call.function.arguments)})
    return None


async def self_judging_agent(task: dict[str, Any], client: Any) -> str | None:
    """Answers, then reports its own reward to the endpoint (a malformed report first: refused)."""
    import httpx

    reply = await client.chat.completions.create(model="policy", messages=list(task["messages"]))
    url, key = f"{client.base_url}rlf/reward", {"Authorization": f"Bearer {client.api_key}"}
    async with httpx.AsyncClient() as http:
        bad = await http.post(url, json={"reward": "high"}, headers=key)
        good = await http.post(url, json={"reward": 0.75}, headers=key)
    return f"{reply.choices[0].message.content} {bad.status_code} {good.status_code}"


async def streaming_agent(task: dict[str, Any], client: Any) -> str | None:
    """The same loop over streamed answers, rebuilt from their chunks."""
    messages: list[Any] = list(task["messages"])
    for _ in range(4):
        stream = await client.chat.completions.create(model="policy", messages=messages, tools=[ADD], stream=True)
        content, calls = "", {}
        async for chunk in stream:
            for choice in chunk.choices:
                content += choice.delta.content or ""
                for c in choice.delta.tool_calls or []:
                    calls[c.index] = {"id": c.id, "type": "function", "function": c.function.model_dump()}
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = list(calls.values())
        messages.append(message)
        if not calls:
            return content
        for call in calls.values():
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": add(call["function"]["arguments"])})
    return None


async def summarising_agent(task: dict[str, Any], client: Any) -> str | None:
    """After the first tool result, starts again from a summary: a rewritten history."""
    messages: list[Any] = list(task["messages"])
    reply = await client.chat.completions.create(model="policy", messages=messages, tools=[ADD])
    call = reply.choices[0].message.tool_calls[0]
    result = add(call.function.arguments)
    summary = [{"role": "user", "content": f"{task['question']} (A tool said: {result}.)"}]
    reply = await client.chat.completions.create(model="policy", messages=summary, tools=[ADD])
    return reply.choices[0].message.content  # type: ignore[no-any-return]


async def fanout_agent(task: dict[str, Any], client: Any) -> str | None:
    """Two sub-agents asked at once, then n=2 choices: requests side by side."""
    ask = [{"role": "user", "content": task["question"]}]
    a, b = await asyncio.gather(
        client.chat.completions.create(model="policy", messages=ask),
        client.chat.completions.create(model="policy", messages=ask),
    )
    both = await client.chat.completions.create(model="policy", messages=ask, n=2)
    return " ".join([a.choices[0].message.content, b.choices[0].message.content, both.choices[1].message.content])


async def crashing_agent(task: dict[str, Any], client: Any) -> str | None:
    await client.chat.completions.create(model="policy", messages=list(task["messages"]))
    raise RuntimeError("the agent's own bug")


async def hanging_agent(task: dict[str, Any], client: Any) -> str | None:
    await client.chat.completions.create(model="policy", messages=list(task["messages"]))
    await asyncio.sleep(3600)
    return None


async def wrong_model_agent(task: dict[str, Any], client: Any) -> str | None:
    await client.chat.completions.create(model="gpt-4o", messages=list(task["messages"]))
    return None


async def endless_agent(task: dict[str, Any], client: Any) -> str | None:
    """Never stops asking: the episode's max_requests ends it."""
    while True:
        await client.chat.completions.create(model="policy", messages=list(task["messages"]))


async def forgetful_agent(task: dict[str, Any], client: Any) -> str | None:
    """Asks, then asks again under a new system prompt: every episode has two segments, whatever the
    model says."""
    ask = list(task["messages"])
    await client.chat.completions.create(model="policy", messages=ask)
    again = [{"role": "system", "content": "Answer with the number only."}, *ask]
    reply = await client.chat.completions.create(model="policy", messages=again)
    return reply.choices[0].message.content  # type: ignore[no-any-return]


def _qwen_agent_tool() -> None:
    from qwen_agent.tools.base import TOOL_REGISTRY, BaseTool, register_tool

    if "add" in TOOL_REGISTRY:
        return

    @register_tool("add")
    class Add(BaseTool):  # qwen-agent's documented way to give an Assistant a tool
        description = "Add two integers."
        parameters = ADD["function"]["parameters"]

        def call(self, params: str | dict, **kwargs: Any) -> str:
            return add(params if isinstance(params, str) else json.dumps(params))


async def qwen_agent_assistant(task: dict[str, Any], client: Any) -> str | None:
    """qwen-agent's ``Assistant`` with a registered tool, its own function-calling prompt and its own
    parsing of calls from the text (the default, ``use_raw_api`` off), pointed at rlf's endpoint."""
    from qwen_agent.agents import Assistant

    _qwen_agent_tool()
    llm = {"model": "policy", "model_server": str(client.base_url), "api_key": client.api_key}
    bot = Assistant(llm=llm, function_list=["add"])

    def run() -> list[dict[str, Any]]:
        replies: list[dict[str, Any]] = []
        for replies in bot.run(messages=list(task["messages"])):  # noqa: B007 (each is the whole reply so far)
            continue
        return replies

    replies = await asyncio.to_thread(run)
    return str(replies[-1].get("content") or "") if replies else None


async def openai_agents_sdk(task: dict[str, Any], client: Any) -> str | None:
    """The OpenAI Agents SDK: an ``Agent`` with a function tool, run by its ``Runner`` over the chat
    completions API of the client rlf gave."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # traces would go to OpenAI's servers

    @function_tool
    def add(a: int, b: int) -> str:
        """Add two integers."""
        return str(a + b)

    model = OpenAIChatCompletionsModel(model="policy", openai_client=client)
    agent = Agent(name="calculator", instructions="Use the add tool for sums.", tools=[add], model=model)
    result = await Runner.run(agent, task["question"], max_turns=4)
    return str(result.final_output)


async def probing_agent(task: dict[str, Any], client: Any) -> str | None:
    """Sends what a broken agent might, over plain HTTP, and returns each status and error code."""
    import httpx

    url, key = str(client.base_url).rstrip("/"), client.api_key
    ok = {"model": "policy", "messages": list(task["messages"])}
    probes: list[tuple[str, dict[str, str], Any]] = [
        ("no key", {}, ok),
        ("unknown key", {"Authorization": "Bearer rlf-not-a-key"}, ok),
        ("another model", {"Authorization": f"Bearer {key}"}, {**ok, "model": "gpt-4o"}),
        ("no messages", {"Authorization": f"Bearer {key}"}, {"model": "policy", "messages": []}),
        ("forced call", {"Authorization": f"Bearer {key}"}, {**ok, "tools": [ADD], "tool_choice": "required"}),
        ("bad role", {"Authorization": f"Bearer {key}"}, {**ok, "messages": [{"role": "robot", "content": "hi"}]}),
        ("not JSON", {"Authorization": f"Bearer {key}"}, b"{nope"),
    ]
    out = {}
    async with httpx.AsyncClient() as http:
        for name, headers, body in probes:
            if isinstance(body, bytes):
                r = await http.post(f"{url}/chat/completions", headers=headers, content=body)
            else:
                r = await http.post(f"{url}/chat/completions", headers=headers, json=body)
            out[name] = [r.status_code, r.json()["error"]["code"]]
        models = await http.get(f"{url}/models", headers={"Authorization": f"Bearer {key}"})
        out["models"] = [models.status_code, models.json()["data"][0]["id"]]
    await client.chat.completions.create(model="policy", messages=list(task["messages"]))
    return json.dumps(out)


def main() -> None:
    """``agent.command``: the SDK loop as a program, configured only by its environment."""
    import openai

    async def run() -> str | None:
        client = openai.AsyncOpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from rlf
        try:
            return await sdk_agent(json.loads(os.environ["RLF_TASK"]), client)
        finally:
            await client.close()

    if sys.argv[1:] == ["hang"]:
        import subprocess

        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])  # a child left behind
        asyncio.run(asyncio.sleep(3600))
    print(asyncio.run(run()))


if __name__ == "__main__":
    main()
