"""The core's default behaviour, each an ordinary plugin registered in-process (names ``rlf.*``)."""
