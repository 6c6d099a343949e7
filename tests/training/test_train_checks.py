"""Bad input on the Train page, said before anything is queued: a hub id this machine cannot reach, a
starting run that is gone or does not fit; and a learning rate far outside its method's usual range,
which is a warning (it trains as asked). The settings have readable labels that name the setting in
their help.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from peftviz.errors import ConfigError
from peftviz.methods import METHODS
from peftviz.run_config import PRESETS, TrainConfig, preset_config
from peftviz.sweep.variants import check_start, starting_runs
from tests.app.test_shared_paths import one_run_store  # noqa: F401  (a fixture, used by name)
from tests.support.job_helpers import fake_queue

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PAGE = str(ROOT / "pages" / "1_Train.py")
HUB_ID = "someone/some-model"


def train_page(preset: str = "smoke", method: str | None = None) -> AppTest:
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=120).run()
    widget(at, "selectbox", "Preset").set_value(preset).run()
    if method:
        widget(at, "selectbox", "Method").set_value(method).run()
    return at


def widget(at: AppTest, kind: str, label: str):
    return next(found for found in at.get(kind) if found.label == label)


def press_train(at: AppTest) -> AppTest:
    return widget(at, "button", "Train").click().run()


# ------------------------------------------------------------------------------------------ a hub id


class FakeHub:
    """The hub as model_info sees it: `answer` is raised for every question, each noted in `asked`."""

    def __init__(self):
        self.asked: list[str] = []
        self.answer: Exception = ConnectionError("[Errno -2] Name or service not known")

    def model_info(self, api, repo_id, **kwargs):
        self.asked.append(repo_id)
        raise self.answer


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache, and a hub that cannot be reached (a test may change its answer)."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    fake = FakeHub()
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda api, repo_id, **kw: fake.model_info(api, repo_id))
    return fake


def test_a_hub_id_without_the_hub_is_refused_on_the_page_without_asking_it(empty_store, hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    queue = fake_queue(monkeypatch)
    at = train_page()
    widget(at, "text_input", "Model").set_value(HUB_ID).run()
    press_train(at)
    assert [error.value for error in at.error] == [
        (
            f"model '{HUB_ID}' is not in this machine's Hugging Face cache and the hub is off (HF_HUB_OFFLINE): "
            f"download it once where the hub is reachable (hf download {HUB_ID}), or give a model folder"
        )
    ]
    assert queue.jobs == [] and hub.asked == []  # the hub was not even asked


def test_a_hub_id_the_hub_cannot_be_asked_about_is_refused_on_the_page(empty_store, hub, monkeypatch):
    import httpx2
    from huggingface_hub.errors import RepositoryNotFoundError

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "0")
    queue = fake_queue(monkeypatch)
    at = train_page()
    widget(at, "text_input", "Model").set_value(HUB_ID).run()
    press_train(at)
    assert [error.value for error in at.error] == [
        (
            f"model '{HUB_ID}' is not in this machine's Hugging Face cache and the hub cannot be reached "
            "(ConnectionError): connect, or give a model folder"
        )
    ]
    request = httpx2.Request("GET", f"https://huggingface.co/api/models/{HUB_ID}")
    hub.answer = RepositoryNotFoundError("404", response=httpx2.Response(404, request=request))
    press_train(at)
    assert [error.value for error in at.error] == [
        f"the Hugging Face hub has no model '{HUB_ID}' this machine may read: check the id"
    ]
    assert queue.jobs == [] and hub.asked == [HUB_ID, HUB_ID]


def test_a_hub_id_in_the_local_cache_is_queued_without_asking_the_hub(empty_store, hub, monkeypatch, tmp_path):
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = Path(huggingface_hub.constants.HF_HUB_CACHE) / "models--someone--some-model"
    (snapshot / "snapshots" / "abc").mkdir(parents=True)
    (snapshot / "snapshots" / "abc" / "config.json").write_text("{}")
    (snapshot / "refs").mkdir()
    (snapshot / "refs" / "main").write_text("abc")
    queue = fake_queue(monkeypatch)
    at = train_page()
    widget(at, "text_input", "Model").set_value(HUB_ID).run()
    press_train(at)
    assert not at.error and hub.asked == []
    assert [job.configs[0].model for job in queue.jobs] == [HUB_ID]


def test_a_name_that_is_neither_a_folder_nor_a_hub_id_is_refused(empty_store, hub, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = train_page()
    widget(at, "text_input", "Model").set_value("not a model!").run()
    press_train(at)
    assert [error.value for error in at.error] == [
        "model 'not a model!' is neither a model folder nor a hub id (owner/name)"
    ]
    assert queue.jobs == [] and hub.asked == []


# ------------------------------------------------------------------------------------ a starting run


@pytest.fixture
def store_copy(one_run_store, tmp_path, monkeypatch):  # noqa: F811
    """A copy of the one-run store, the app pointed at it: a test may break it."""
    from peftviz.store.runs import list_runs

    store, _ = one_run_store
    copy = tmp_path / "runs"
    shutil.copytree(store, copy)
    monkeypatch.setenv("PEFTVIZ_RUNS", str(copy))
    (run,) = list_runs(copy)
    return run


def choose_starting_run(run) -> AppTest:
    at = train_page(method=run.config.method)
    widget(at, "selectbox", "Start from run").set_value(str(run.params_path)).run()
    widget(at, "number_input", "n_heads").set_value(4).run()
    return at


def test_a_starting_run_of_another_head_size_is_refused_on_the_page(store_copy, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = choose_starting_run(store_copy)
    widget(at, "number_input", "head_dim").set_value(2).run()
    press_train(at)
    assert [error.value for error in at.error] == [f"starting run {store_copy.name} (init_from) has head_dim 1, not 2"]
    assert queue.jobs == []


def test_a_starting_run_stays_chosen_when_another_model_is_typed_and_is_refused(store_copy, monkeypatch):
    """Another model offers other runs; the run chosen before is not dropped in silence (training from scratch)."""
    queue = fake_queue(monkeypatch)
    at = choose_starting_run(store_copy)
    widget(at, "text_input", "Model").set_value("tiny-roberta").run()
    box = widget(at, "selectbox", "Start from run")
    assert box.options == ["none", "a run no longer offered (gone, or of another model)"] and box.index == 1
    press_train(at)
    assert [error.value for error in at.error] == [
        (
            f"starting run {store_copy.name} (init_from) was trained on tiny-bert, not tiny-roberta; its parameters "
            "fit only that model"
        )
    ]
    assert queue.jobs == []


def test_a_starting_run_gone_from_the_store_is_refused_on_the_page(store_copy, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = choose_starting_run(store_copy)
    store_copy.params_path.unlink()  # after it was offered
    press_train(at)
    assert [error.value for error in at.error] == [
        "the starting run (init_from) is no longer in the store; choose another"
    ]
    assert queue.jobs == []


def test_a_starting_run_fits_only_its_own_model_and_method(store_copy):
    """The planner reads what the method declares (`starts_from`): a complete run of the same method with its
    `requires`, on the same model, of the same head size."""
    method = store_copy.method_class
    link = method.start_option()
    path = str(store_copy.params_path)
    config = replace(store_copy.config, method_options={link: path, "n_heads": 4}, seed=3)
    check_start(config, [store_copy])  # fits: no error
    other_model = replace(config, model="tiny-roberta")
    with pytest.raises(
        ConfigError, match=rf"run {store_copy.name} \(init_from\) was trained on tiny-bert, not tiny-roberta"
    ):
        check_start(other_model, [store_copy])
    assert starting_runs(method, [store_copy], "tiny-roberta") == []
    assert starting_runs(method, [store_copy], "tiny-bert") == [store_copy]
    with pytest.raises(ConfigError, match="no longer in the store"):
        check_start(replace(config, method_options={link: "/etc/passwd"}), [store_copy])
    four_heads = replace(store_copy, config=replace(store_copy.config, method_options={"n_heads": 4}))
    assert starting_runs(method, [four_heads], "tiny-bert") == []  # not one head: not what `requires` asks
    with pytest.raises(ConfigError, match=rf"run {store_copy.name} \(init_from\) is not a complete .* with n_heads=1"):
        check_start(config, [four_heads])
    stopped = replace(store_copy, status="incomplete")
    assert starting_runs(method, [stopped], "tiny-bert") == []
    with pytest.raises(ConfigError, match="is not a complete"):
        check_start(config, [stopped])


def test_a_stopped_run_whose_start_points_outside_its_store_is_refused_before_it_resumes(store_copy):
    from peftviz.errors import RunError
    from peftviz.sweep.variants import check_start_inside

    link = store_copy.method_class.start_option()
    inside = replace(store_copy, config=replace(store_copy.config, method_options={link: str(store_copy.params_path)}))
    check_start_inside(inside)  # its own store: no error
    outside = replace(store_copy, config=replace(store_copy.config, method_options={link: "/etc/passwd"}))
    with pytest.raises(RunError, match=r"config.json: init_from points outside the store \(/etc/passwd\)"):
        check_start_inside(outside)


# ------------------------------------------------------------------------------------- learning rate


def test_a_learning_rate_far_outside_the_methods_range_is_a_warning_that_names_the_range(empty_store, monkeypatch):
    """The reported case: LoRA at a learning rate of 10 trained without a word (ECE 0.8167)."""
    queue = fake_queue(monkeypatch)
    at = train_page(method="lora")
    assert not at.warning  # the preset's rate
    low, high = METHODS["lora"].usual_learning_rates()
    widget(at, "number_input", "Learning rate").set_value(10.0).run()
    assert [warning.value for warning in at.warning] == [
        (
            f"Learning rate 10 is far outside lora's usual range, {low:g} to {high:g} (its papers' grid and the "
            "presets): it will train, but expect it to diverge or hardly to move"
        )
    ]
    assert (low, high) == (5e-4, 5e-2)
    press_train(at)
    assert not at.error and [job.configs[0].learning_rate for job in queue.jobs] == [10.0]  # warned, not refused


def test_no_preset_rate_of_any_method_is_warned_about_and_ten_times_beyond_the_range_is():
    for name, method in METHODS.items():
        for preset in PRESETS:
            rate = preset_config(preset, name).learning_rate
            assert method.learning_rate_note(rate) is None, (name, preset, rate)
        low, high = method.usual_learning_rates()
        assert method.learning_rate_note(high * 10) is None and method.learning_rate_note(high * 10.5)
        assert method.learning_rate_note(low / 10) is None and method.learning_rate_note(low / 10.5)
        assert method.learning_rate_note(-1.0) is None  # refused by the config, not warned about
    assert METHODS["fine-tuning"].usual_learning_rates() == (3e-5, 1e-3)


# ------------------------------------------------------------------------------------------- labels


def test_the_settings_have_readable_labels_that_name_the_setting_in_their_help(empty_store):
    at = train_page()
    fields = set(TrainConfig.help())
    widgets = [*at.number_input, *at.selectbox, *at.checkbox, *at.text_input]
    assert not [w.label for w in widgets if w.label in fields and w.label != "model"]
    length = widget(at, "number_input", "Tokens per document")
    assert length.help.startswith("Tokens per document, [CLS] and [SEP] included") and "(`max_length`)" in length.help
    assert "(`seed`)" in widget(at, "number_input", "First training seed").help
    assert widget(at, "number_input", "Number of seeds").value == 1
