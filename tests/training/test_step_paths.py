"""The training step's optional paths as a run uses them: compiled layers and the Longformer's flex attention.

Each is a setting (`compile_layers`, `local_attention`) that must change how a step runs and nothing it
computes: a smoke run with it gives the probabilities of the same run without it.
"""

import numpy as np

from peftviz.cli import main
from peftviz.modeling import compiled, longformer
from peftviz.run_config import preset_config
from peftviz.training import trainer
from peftviz.training.trainer import train


def smoke(**settings):
    return preset_config("smoke", "prefix-propagation", epochs=1, device="cpu", **settings)


def probabilities(run) -> dict[str, np.ndarray]:
    return {name: run.predictions(name)[0] for name in (1, "test")}


def test_compiled_layers_train_the_same_run(tmp_path, monkeypatch):
    """Compiled with dynamo's eager backend (its graphs, the eager kernels: the same numbers to the bit), so the
    test checks what the trainer compiles and that the run goes through it, not inductor's kernels (those are
    tests/modeling/test_compiled.py's)."""
    compiled_encoders = []

    def compile_eagerly(encoder):
        compiled_encoders.append(encoder)
        return compiled.compile_layers(encoder, backend="eager")

    monkeypatch.setattr(trainer, "compile_layers", compile_eagerly)
    plain = train(smoke(), tmp_path)
    assert not compiled_encoders
    run = train(smoke(compile_layers=True), tmp_path)
    assert len(compiled_encoders) == 1 and run.config.compile_layers
    for name, probs in probabilities(plain).items():
        np.testing.assert_array_equal(probabilities(run)[name], probs, err_msg=str(name))


def test_flex_attention_trains_the_same_run_on_a_longformer(tmp_path, monkeypatch):
    """On the CPU the backward runs the blocks (no CPU backward in torch's FlexAttention) and every evaluation
    runs flex: the same probabilities to float32's rounding."""
    calls, real = [], longformer.flex_local_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(longformer, "flex_local_attention", counted)
    blocks = train(smoke(model="tiny-longformer"), tmp_path)
    assert not calls
    flex = train(smoke(model="tiny-longformer", local_attention="flex"), tmp_path)
    assert calls and flex.config.local_attention == "flex"
    for name, probs in probabilities(blocks).items():
        np.testing.assert_allclose(probabilities(flex)[name], probs, atol=1e-5, err_msg=str(name))


def test_flex_on_an_encoder_without_windows_is_refused_in_one_line(tmp_path, capsys):
    store = tmp_path / "runs"
    assert main(["train", "--preset", "smoke", "--local-attention", "flex", "--runs-dir", str(store)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "local attention flex: only Longformer encoders have a windowed attention" in error and "bert" in error
    assert not store.exists() or not any(store.iterdir())  # refused before any run folder
