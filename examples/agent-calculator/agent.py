"""An agent written for the OpenAI SDK, trained by rlf unchanged: it answers arithmetic questions with
its own calculator tool, in a hand-written tool loop. rlf hands it a client pointed at the policy
(``agent.entry: agent.py:run``); outside rlf, the same function runs against any OpenAI-compatible
server (``python agent.py "What is 12+7?"`` with OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL set)."""

from __future__ import annotations

import ast
import asyncio
import json
import operator
import os
import sys
from pathlib import Path
from typing import Any

TOOLS = json.loads(Path(__file__).with_name("tools.json").read_text())
MODEL = os.environ.get("OPENAI_MODEL", "policy")
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> str:
    """+, -, * and / over numbers, nothing else."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not arithmetic: {ast.dump(node)}")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"error: {exc}"
    return str(int(result)) if float(result).is_integer() else str(result)


async def run(task: dict[str, Any], client: Any) -> str | None:
    """Ask, run the calls the model makes, send the results back, until it answers (three turns at most)."""
    messages: list[Any] = list(task["messages"])
    for _ in range(3):
        reply = await client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content  # type: ignore[no-any-return]
        for call in message.tool_calls:
            try:
                result = calculate(json.loads(call.function.arguments).get("expression", ""))
            except (ValueError, AttributeError) as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None


if __name__ == "__main__":
    import openai

    async def main(question: str) -> None:
        async with openai.AsyncOpenAI() as client:
            print(await run({"messages": [{"role": "user", "content": question}]}, client))

    asyncio.run(main(sys.argv[1]))
