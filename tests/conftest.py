import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if "PYTEST_XDIST_WORKER" in os.environ:
    # one torch thread per worker (read when torch is imported, here and in child processes): the workers already
    # fill the machine's cores, and two threads each would contend for them
    os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path

import pytest
from filelock import FileLock

from tests.support.helpers import BERT_FAMILIES, FAMILIES

# session stores trained on the shipped MiniLM (a minute or more each): a test that reads one is slow; so is a test
# that reads a module's own runs trained on it (test_train.py's smoke comparison, the peft methods' pages store) or
# the coverage simulation of the seed intervals (test_seed_bootstrap.py)
SLOW_FIXTURES = {"smoke_store", "seeds_store", "mixed_store", "newcomer_walk", "smoke_runs", "peft_store", "coverages"}
# Under pytest-xdist (scripts/test.sh runs two workers) each group's tests run on one worker: a test file's tests
# together, so that its module fixtures are built once, and across files those that start a local Ray cluster, and
# those that drive Chromium (one browser at a time: their audits wait on timeouts, and two browsers on two cores were
# not tried) with those of the newcomer's walk, whose Walk holds a live job queue no other process can share.
XDIST_GROUPS = (
    ("browser", lambda item: "browser" in item.keywords or "newcomer_walk" in item.fixturenames),
    ("ray", lambda item: "local_ray" in item.fixturenames or item.path.name == "test_page_home_train.py"),
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the marks below count there
def pytest_collection_modifyitems(config, items):
    """The fast tier (`-m "not slow and not browser"`, docs/tests.md) leaves out the browser tests and every test that
    reads a trained store; slower tests besides those carry `@pytest.mark.slow` themselves."""
    for item in items:
        if "browser" in item.path.relative_to(config.rootpath).parts:
            item.add_marker(pytest.mark.browser)
        if SLOW_FIXTURES & set(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        group = next((name for name, holds in XDIST_GROUPS if holds(item)), item.nodeid.split("::")[0])
        item.add_marker(pytest.mark.xdist_group(group))


def built_once(tmp_path_factory, name: str, build, scratch: bool = False) -> Path:
    """`build(folder)` (`build(folder, scratch)` with a scratch folder beside it) run once per test run, its folder
    shared by every pytest-xdist worker: built by the first worker to ask, under a file lock, the others waiting
    for it. Without xdist: folders of this process. Stores built so are read-only for tests, as they always were:
    a test that changes one copies it first."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder, extra = tmp_path_factory.mktemp(name), tmp_path_factory.mktemp(f"{name}_scratch")
    else:
        root = tmp_path_factory.getbasetemp().parent  # the run's temporary root, above each worker's own
        folder, extra = root / name, root / f"{name}_scratch"
    with FileLock(f"{folder}.lock"):
        built = folder.with_suffix(".built")
        if not built.exists():
            folder.mkdir(parents=True, exist_ok=True)
            extra.mkdir(parents=True, exist_ok=True)
            build(folder, extra) if scratch else build(folder)
            built.touch()
    return folder


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread: tiny models run many times faster than on two threads contending for a busy
    machine's cores, and float sums keep one order (a Ray task has one thread)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=FAMILIES)
def family(request):
    """Every family-parametrised test runs on a tiny BERT, a tiny RoBERTa and a tiny Longformer."""
    return request.param


@pytest.fixture(params=BERT_FAMILIES)
def bert_family(request):
    """Tests that read BERT-style self-attention modules (query/key/value, one mask) directly."""
    return request.param


@pytest.fixture(scope="session")
def smoke_store(tmp_path_factory):
    """A run store made by the smoke preset: the six runs of `compare` plus kernel runs at three α."""
    from peftviz.run_config import alpha_grid
    from peftviz.sweep.variants import comparison_configs
    from tests.support.sweeps import trained

    configs = comparison_configs("smoke") + alpha_grid("smoke", (1e-3, 1e-2, 4e-2))
    return built_once(tmp_path_factory, "smoke_store", lambda store: trained(configs, store))


@pytest.fixture
def app_store(smoke_store, monkeypatch):
    """Point the app at the smoke store."""
    monkeypatch.setenv("PEFTVIZ_RUNS", str(smoke_store))
    return smoke_store


@pytest.fixture
def empty_store(tmp_path, monkeypatch):
    """Point the app at an empty store."""
    monkeypatch.setenv("PEFTVIZ_RUNS", str(tmp_path / "runs"))
    return tmp_path / "runs"


@pytest.fixture(scope="session")
def seeds_store(tmp_path_factory):
    """The smoke comparison at training seeds 0 and 1: six groups of two runs on one split."""
    from peftviz.run_config import over_seeds
    from peftviz.sweep.variants import comparison_configs
    from tests.support.sweeps import trained

    configs = over_seeds(comparison_configs("smoke"), [0, 1])
    return built_once(tmp_path_factory, "seeds_store", lambda store: trained(configs, store))


@pytest.fixture
def app_seeds_store(seeds_store, monkeypatch):
    """Point the app at the store with two seeds per method."""
    monkeypatch.setenv("PEFTVIZ_RUNS", str(seeds_store))
    return seeds_store


@pytest.fixture(scope="session")
def recorded_store(tmp_path_factory):
    """Only runs other loops trained and recorded (`tests.support.mixed_store.record_other_loops`): a Trainer's
    LoRA and a loop's own method at seeds 0, 1, on the same "tokens" examples (a few seconds)."""
    from tests.support.mixed_store import record_other_loops

    return built_once(tmp_path_factory, "recorded_store", record_other_loops, scratch=True)


@pytest.fixture(scope="session")
def mixed_store(tmp_path_factory):
    """Single runs, groups of 2 and 3 seeds, an imported run, two datasets and two models (`tests.support.mixed_store`;
    about 15 s). Read-only for tests: copy it before changing it."""
    from tests.support.mixed_store import build

    return built_once(tmp_path_factory, "mixed_store", build, scratch=True)


@pytest.fixture
def app_mixed_store(mixed_store, monkeypatch):
    """Point the app at the mixed store."""
    monkeypatch.setenv("PEFTVIZ_RUNS", str(mixed_store))
    return mixed_store


@pytest.fixture(scope="session")
def newcomer_walk(tmp_path_factory):
    """The newcomer's path of issue 32 walked once (`tests.support.newcomer_path`): the Train page with a double click,
    `compare --seeds 2`, export and import, `report`; what each step left. Read-only for tests."""
    from tests.support.newcomer_path import walk

    return walk(tmp_path_factory.mktemp("newcomer") / "runs", tmp_path_factory.mktemp("newcomer_scratch"))


@pytest.fixture(scope="session")
def newcomer_store(newcomer_walk):
    """The store the newcomer's path left: LoRA and prefix-propagation at seeds 0 and 1, LoRA imported."""
    return newcomer_walk.store
