"""Plugin sources and worker functions shared by tests."""

ADDER_PLUGIN = '''
from rlfcore import hookimpl
from rlfcore.tools import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@hookimpl
def register_tools(ctx):
    return [add]
'''

# ADDER_PLUGIN: a local plugin file with one tool (`add`), for tests that need a tool but not a
# particular plugin; the GPU check ships the same one.


def square_in_worker(x: int) -> tuple[int, int]:
    """A stand-in for CPU-heavy scoring: the result and the process that computed it."""
    import os

    return x * x, os.getpid()


def die_in_worker() -> None:
    """A scorer whose worker process exits underneath it (a crash, the OOM killer)."""
    import os

    os._exit(3)


TINY_SIZES = {
    "vocab_size": 300,
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "intermediate_size": 64,
}
"""``model.init`` sizes of the smallest model a training test builds from its rows (seconds to train)."""
