"""Secrets stay out of what rlf prints, saves and logs (issue 33, item 6): ``engine.api_key_env`` names
the variable that holds the key, and every setting named like a secret is redacted in ``rlf config``,
a run folder's ``config.yaml`` and the trackers' copy of the config, while the saved config still
resumes (it keeps the variable's name, never a value)."""

from __future__ import annotations

import pytest
import yaml

from rlfcore.config import ConfigError, EngineConfig, load_config
from rlfcore.engines.chat import ChatEngine
from rlfcore.engines.openai import OpenAIEngine
from rlfcore.schema import REDACTED, is_secret, redacted
from tests.support.rlf import run_rlf

KEY = "sk-test-0123456789"


def _served(tmp_path, engine: str):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"engine": {"name": engine, "base_url": "http://127.0.0.1:9/v1"}}))
    return path


def test_rlf_config_prints_no_key_given_in_clear_nor_in_a_mistyped_key(tmp_path):
    config = _served(tmp_path, "openai")
    out = run_rlf("config", str(config), f"engine.api_key={KEY}")
    assert out.returncode == 0, out.stderr
    assert yaml.safe_load(out.stdout)["engine"]["api_key"] == REDACTED
    assert KEY not in out.stdout + out.stderr
    typo = run_rlf("config", str(config), f"engine.api_keyy={KEY}")
    assert typo.returncode == 2 and "engine.api_keyy: unknown key (value '<redacted>')" in typo.stderr
    assert KEY not in typo.stdout + typo.stderr


def test_api_key_env_gives_the_engines_the_key_and_names_an_unset_variable(tmp_path, monkeypatch):
    config = _served(tmp_path, "openai")
    monkeypatch.setenv("RLF_TEST_KEY", KEY)
    cfg, _ = load_config(config, ["engine.api_key_env=RLF_TEST_KEY"])
    assert OpenAIEngine.from_config(cfg.engine).api_key == KEY
    assert ChatEngine.from_config(cfg.engine).api_key == KEY
    assert cfg.resolved()["engine"]["api_key_env"] == "RLF_TEST_KEY"  # a name, not a secret: shown as it is

    monkeypatch.delenv("RLF_TEST_KEY")
    with pytest.raises(ConfigError) as caught:
        load_config(config, ["engine.api_key_env=RLF_TEST_KEY"])
    assert "engine.api_key_env: names RLF_TEST_KEY, which is not set in the environment" in str(caught.value)
    with pytest.raises(ValueError, match="engine.api_key_env names RLF_TEST_KEY, which is not set"):
        OpenAIEngine.from_config(cfg.engine)
    transformers, _ = load_config({"engine": {"api_key_env": "RLF_TEST_KEY"}})  # an engine that sends no key
    assert transformers.engine.api_key_env == "RLF_TEST_KEY"
    with pytest.raises(ValueError, match="engine.api_key or engine.api_key_env"):
        EngineConfig(api_key=KEY, api_key_env="RLF_TEST_KEY")


def test_a_saved_config_keeps_the_variable_and_asks_again_for_a_key_given_in_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("RLF_TEST_KEY", KEY)
    config = _served(tmp_path, "openai")
    by_name, _ = load_config(config, ["engine.api_key_env=RLF_TEST_KEY"])
    by_name.save(tmp_path / "named.yaml")
    assert KEY not in (tmp_path / "named.yaml").read_text()
    again, _ = load_config(tmp_path / "named.yaml")
    assert OpenAIEngine.from_config(again.engine).api_key == KEY  # the saved copy still runs

    in_clear, _ = load_config(config, [f"engine.api_key={KEY}"])
    in_clear.save(tmp_path / "clear.yaml")
    assert KEY not in (tmp_path / "clear.yaml").read_text()
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "clear.yaml")
    assert "engine.api_key: a secret, not saved with the config: give it again as engine.api_key=..." in str(
        caught.value
    )
    given, _ = load_config(tmp_path / "clear.yaml", [f"engine.api_key={KEY}"])
    assert OpenAIEngine.from_config(given.engine).api_key == KEY


def test_secrets_are_found_by_name_everywhere_in_a_config():
    for name in ("api_key", "judge_api_key", "hf_token", "GITHUB_TOKEN", "X-Auth-Token", "password", "Authorization"):
        assert is_secret(name), name
    for name in ("api_key_env", "max_tokens", "max_response_tokens", "micro_batch_tokens", "tokenizer", "passages"):
        assert not is_secret(name), name
    plugin_sections = {
        "judge-qwq": {"endpoints": [{"url": "http://judge/v1", "api_key": KEY}], "max_tokens": 8192},
        "mcp": {"servers": {"gh": {"env": {"GITHUB_TOKEN": KEY, "HOME": "/home/u"}, "headers": {}}}},
        "engine": {"api_key": None, "api_key_env": "NAME"},
    }
    assert redacted(plugin_sections) == {
        "judge-qwq": {"endpoints": [{"url": "http://judge/v1", "api_key": REDACTED}], "max_tokens": 8192},
        "mcp": {"servers": {"gh": {"env": {"GITHUB_TOKEN": REDACTED, "HOME": "/home/u"}, "headers": {}}}},
        "engine": {"api_key": None, "api_key_env": "NAME"},
    }
