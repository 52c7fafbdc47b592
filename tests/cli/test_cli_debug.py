"""``--debug`` as click parses it, not any ``--debug`` word on the command line."""

from __future__ import annotations

import pytest

from rlfcore.cli import main


@pytest.fixture()
def broken_config(tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    cfg = tmp_path / "run.yaml"
    cfg.write_text("local_plugins: [broken.py]\n")
    return str(cfg)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    return int(exit_.value.code or 0), capsys.readouterr().err


def test_debug_option_shows_the_plugin_traceback(broken_config, capsys):
    code, err = _run(["--debug", "config", broken_config], capsys)
    assert code == 1 and "plugin 'broken'" in err and "Traceback" in err


def test_a_debug_word_that_is_an_argument_is_no_debug_option(broken_config, capsys):
    """After ``--``, ``--debug`` is an override for ``rlf config``, not the group's flag."""
    code, err = _run(["config", broken_config, "--", "--debug"], capsys)
    assert code == 1 and "plugin 'broken'" in err
    assert "Traceback" not in err and "(run with --debug for the traceback)" in err
