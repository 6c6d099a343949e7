"""The Train page keeps the settings shared by every method when the method changes (issue 45): a setting the
user changed stays; one left at its default follows the new method's (the learning rate, `learning_rates`)."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from peftviz.methods import PEFT_PREFIX
from peftviz.run_config import preset_config
from tests.support.job_helpers import fake_queue

ROOT = Path(__file__).resolve().parents[2]
TRAIN_PAGE = str(ROOT / "pages" / "1_Train.py")
FIRST, OTHER = "prefix-propagation", "fine-tuning"  # the smoke preset trains them at 0.01 and 0.001
CHANGED = {
    "Epochs": 5,
    "Batch size": 4,
    "Examples per split": 60,
    "Tokens per document": 48,
    "First training seed": 7,
    "Number of seeds": 2,
}
CHOSEN = {"Learning-rate schedule": "cosine", "Pooling": "mean"}


def smoke_page() -> AppTest:
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    at.selectbox[0].set_value("smoke").run()
    return method(at, FIRST)


def method(at: AppTest, name: str) -> AppTest:
    if name.startswith(PEFT_PREFIX):
        at.selectbox(key="train_method").set_value(f"{PEFT_PREFIX}<TYPE>…").run()
        return at.selectbox(key="train_peft_type").set_value(name.removeprefix(PEFT_PREFIX)).run()
    return at.selectbox(key="train_method").set_value(name).run()


def number(at: AppTest, label: str):
    return next(box for box in at.number_input if box.label == label)


def choice(at: AppTest, label: str):
    return next(box for box in at.selectbox if box.label == label)


def shown(at: AppTest) -> dict:
    return {
        **{label: number(at, label).value for label in CHANGED},
        **{label: choice(at, label).value for label in CHOSEN},
    }


def rate(at: AppTest) -> float:
    return number(at, "Learning rate").value


def test_settings_the_user_changed_stay_when_the_method_changes(empty_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = smoke_page()
    for label, value in CHANGED.items():
        number(at, label).set_value(value).run()
    for label, value in CHOSEN.items():
        choice(at, label).set_value(value).run()
    wanted = {**CHANGED, **CHOSEN}
    for name in (OTHER, f"{PEFT_PREFIX}LORA", FIRST):
        method(at, name)
        assert not at.exception and not at.error and shown(at) == wanted, name
    method(at, OTHER)
    at.button[0].click().run()
    assert not at.exception and not at.error
    (configs,) = [job.configs for job in queue.jobs]
    assert [config.seed for config in configs] == [7, 8] and {config.method for config in configs} == {OTHER}
    trained = configs[0]
    assert (trained.epochs, trained.batch_size, trained.limit, trained.max_length) == (5, 4, 60, 48)
    assert (trained.schedule, trained.pooling) == ("cosine", "mean")
    assert trained.learning_rate == preset_config("smoke", OTHER).learning_rate  # never touched: the method's own


def test_a_learning_rate_left_alone_follows_each_methods_default(empty_store, monkeypatch):
    fake_queue(monkeypatch)
    at = smoke_page()
    defaults = {name: preset_config("smoke", name).learning_rate for name in (FIRST, OTHER)}
    assert defaults[FIRST] != defaults[OTHER]
    for name in (FIRST, OTHER, FIRST, OTHER):
        method(at, name)
        assert rate(at) == defaults[name], name


def test_a_learning_rate_the_user_set_stays_with_every_method(empty_store, monkeypatch):
    fake_queue(monkeypatch)
    at = smoke_page()
    number(at, "Learning rate").set_value(0.02).run()
    for name in (OTHER, f"{PEFT_PREFIX}LORA", FIRST):
        method(at, name)
        assert rate(at) == 0.02, name


def test_a_setting_set_back_to_the_default_follows_the_method_again(empty_store, monkeypatch):
    """What 'left at its default' means: the value the field shows is the default it was drawn with."""
    fake_queue(monkeypatch)
    at = smoke_page()
    first = rate(at)
    number(at, "Learning rate").set_value(0.03).run()
    number(at, "Learning rate").set_value(first).run()
    method(at, OTHER)
    assert rate(at) == preset_config("smoke", OTHER).learning_rate


def test_a_preset_fills_the_settings_in_anew(empty_store, monkeypatch):
    fake_queue(monkeypatch)
    at = smoke_page()
    number(at, "Epochs").set_value(5).run()
    at.selectbox[0].set_value("quick").run()
    assert number(at, "Epochs").value == preset_config("quick", FIRST).epochs != 5


def test_the_page_says_which_settings_stay(empty_store):
    at = AppTest.from_file(TRAIN_PAGE, default_timeout=60).run()
    assert any("A setting you change stays when you change the method" in caption.value for caption in at.caption)
