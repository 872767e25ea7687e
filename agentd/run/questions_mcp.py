"""The `drover` MCP server a Claude Code or opencode session starts over stdio: one tool, ask_question,
which sends the question to the people behind the Change through the run's model gateway (the run
token is its only credential; the gateway, outside the sandbox, asks the control plane).

    python -I -S agentd/run/questions_mcp.py        # env DROVER_GATEWAY_URL, DROVER_RUN_TOKEN

Model Context Protocol over stdio: newline-delimited JSON-RPC 2.0 (initialize, tools/list,
tools/call, ping). Standard library only, like the launcher and the forwarder beside it."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

PROTOCOL = "2025-06-18"
TOOL = {
    "name": "ask_question",
    "description": (
        "Ask the people behind this Change a question you cannot answer from the repository. With blocking "
        "true (the default) the session waits for the answer after your turn ends: end your turn once you "
        "have done what you can without it; the answer arrives as the next message."
    ),
    "inputSchema": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "The question, with the context needed to answer it"},
            "blocking": {"type": "boolean", "description": "Wait for the answer (default true)"},
        },
        "required": ["question"],
    },
}


def ask(question: str, blocking: bool) -> str:
    url = os.environ.get("DROVER_GATEWAY_URL", "").rstrip("/") + "/drover/v1/questions"
    body = json.dumps({"question": question, "blocking": blocking}).encode()
    request = urllib.request.Request(
        url,
        data=body,
        headers={"content-type": "application/json", "x-api-key": os.environ.get("DROVER_RUN_TOKEN", "")},
    )
    with urllib.request.urlopen(request, timeout=120) as answer:
        sent = json.loads(answer.read())
    if blocking:
        return (
            f"Question {sent['id']} was sent. Finish what you can without the answer, then end your turn: "
            "the session waits, and the answer arrives as the next message."
        )
    return f"Question {sent['id']} was sent; an answer, if any, arrives as a later message."


def handle(message: dict[str, Any]) -> dict[str, Any] | None:
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None  # a notification (initialized, cancelled): nothing to answer
    if method == "initialize":
        result: Any = {
            "protocolVersion": (message.get("params") or {}).get("protocolVersion") or PROTOCOL,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "drover", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "ping":
        result = {}
    elif method == "tools/call":
        params = message.get("params") or {}
        args = params.get("arguments") or {}
        if params.get("name") != "ask_question" or not str(args.get("question") or "").strip():
            result = {"content": [{"type": "text", "text": "ask_question needs a question"}], "isError": True}
        else:
            try:
                text = ask(str(args["question"]), bool(args.get("blocking", True)))
                result = {"content": [{"type": "text", "text": text}], "isError": False}
            except (OSError, ValueError, KeyError, urllib.error.URLError) as err:
                result = {"content": [{"type": "text", "text": f"the question was not sent: {err}"}], "isError": True}
    else:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        answer = handle(message)
        if answer is not None:
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
