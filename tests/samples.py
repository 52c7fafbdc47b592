"""Plugin sources shared by tests; a plain module (not conftest) so Ray workers can import it too."""

from rlfcore.backends.verl.gpu_check import PLUGIN as ADDER_PLUGIN  # noqa: F401  (re-exported for tests)

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
