"""Limits the tests' sandboxes run with: small, so hostile code is stopped fast and cannot reach far."""

from rlf_code.settings import Limits

SMALL = Limits(call_timeout_s=3, cpu_s=20, memory_mb=512, file_size_mb=8, disk_mb=32, processes=32)
