"""The ``python`` and ``bash`` tools: code in, what it printed and returned out, in the trajectory's sandbox."""

from __future__ import annotations

from rlf_code.pool import Session
from rlf_code.settings import Settings
from rlfcore import Tool, tool


class CodeError(RuntimeError):
    """The code raised, or the sandbox stopped it: the model reads the message as an error result."""


def run(session: Session | None, code: str, mode: str) -> str:
    if session is None:
        raise CodeError("no sandbox: the python tool runs only inside a trajectory (enable the code plugin)")
    out = session.call(code, mode)
    if not out.ok:
        raise CodeError(out.render())
    return out.render()


def make_tools(settings: Settings) -> list[Tool]:
    timeout = settings.limits.call_timeout_s + settings.limits.start_timeout_s  # the sandbox stops it first

    @tool(timeout_s=timeout)
    def python(code: str, session: Session | None = None) -> str:
        """Run Python in a persistent interpreter (variables, imports and files stay between calls).
        Prints and the value of the last expression are returned. No network.

        Args:
            code: Python source to run.
        """
        return run(session, code, "python")

    @tool(timeout_s=timeout)
    def bash(script: str, session: Session | None = None) -> str:
        """Run a bash script in the same sandbox and working directory as the python tool. No network.

        Args:
            script: The bash script.
        """
        return run(session, script, "bash")

    return [python, bash] if settings.bash_tool else [python]
