"""The in-process judge (backend: transformers) with a real, tiny, randomly initialised model.

Its verdicts are gibberish, so these tests check the plumbing: the model really generates, the
answer is unreadable, it is asked again, and the sample ends with an error and reward 0, no crash.
"""

from __future__ import annotations

import pytest
import yaml
from rlf_judge_qwq.endpoints import Completion
from rlf_judge_qwq.judge import Judge
from rlf_judge_qwq.local import TransformersJudge
from rlf_judge_qwq.metrics import JudgeMetrics
from rlf_judge_qwq.settings import JudgeSettings

from rlfcore import Sample
from rlfcore.testing import rollout

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    from rlfcore.testing import build_tiny

    texts = ["You are a strict grader. VERDICT: 7", "What is 6 x 7? The answer is 42."] * 20
    return build_tiny(texts, tmp_path_factory.mktemp("models") / "judge", vocab_size=320, max_position_embeddings=2048)


def _sample(response: str) -> Sample:
    messages = [{"role": "user", "content": "What is 6 x 7?"}, {"role": "assistant", "content": response}]
    return Sample(id="s", env="e", messages=messages, response=response, ground_truth="42")


async def test_a_tiny_model_judges_and_its_gibberish_is_an_error(tiny_judge):
    settings = JudgeSettings(backend="transformers", model_path=str(tiny_judge), max_tokens=6, parse_retries=1)
    judge = Judge(settings)
    [score] = await judge.judge_group([_sample("42")])
    assert score.value == 0.0 and score.error.startswith("judge-qwq: unreadable verdict in all 2 answers")
    assert judge.metrics.requests == 2 and judge.metrics.errors["unreadable"] == 2
    assert judge.metrics.by_endpoint == {"local": 2}


def test_the_pipeline_finds_the_model_beside_the_config(tiny_judge, tmp_path):
    judge_dir = tmp_path / "judge"
    judge_dir.symlink_to(tiny_judge, target_is_directory=True)
    path = tmp_path / "run.yaml"
    section = {"backend": "transformers", "model_path": "judge", "max_tokens": 4, "parse_retries": 0}
    raw = {"plugins": ["judge-qwq"], "judge-qwq": section, "reward": {"weights": {"judge": 1.0}}}
    path.write_text(yaml.safe_dump(raw))
    [traj] = rollout(str(path), [{"id": "q", "prompt": "What is 6 x 7?"}], {"q": ["42"]})
    assert traj.reward_components["judge.judge-qwq"] == 0.0 and traj.reward == 0.0


async def test_an_injected_generate_function_maps_verdicts(tiny_judge):
    seen = []

    def generate(messages, max_tokens):
        seen.append((messages[-1]["content"], max_tokens))
        return Completion("<think>\nThe answer is right.\n</think>\nVERDICT: 9", "stop")

    settings = JudgeSettings(backend="transformers", model_path=str(tiny_judge), max_tokens=5, reward_min=-1.0)
    metrics = JudgeMetrics()
    judge = Judge(settings, backend=TransformersJudge(tiny_judge, metrics, generate_fn=generate))
    [score] = await judge.judge_group([_sample("42")])
    assert score.value == pytest.approx(-1.0 + 0.9 * 2.0) and score.error is None
    assert seen[0][1] == 5 and "<response-" in seen[0][0] and metrics.requests == 1


async def test_a_missing_model_folder_is_an_error_not_a_crash(tmp_path):
    judge = Judge(JudgeSettings(backend="transformers", model_path=str(tmp_path / "absent")))
    [score] = await judge.judge_group([_sample("42")])
    assert score.value == 0.0 and "FileNotFoundError" in score.error and "absent" in score.error
