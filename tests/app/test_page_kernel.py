"""The Kernel page: λ(C), the α sweep and its cache, the kernel runs trained at α, figures, the page."""

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from streamlit.testing.v1 import AppTest

from peftviz import build_classifier, load_encoder
from peftviz.analysis import attention, kernel
from peftviz.figures import kernel as figures
from peftviz.methods.kernel_prefix_propagation import ALPHA_GRID
from peftviz.run_config import alpha_grid
from peftviz.store import caches
from peftviz.store.runs import list_runs, load_run
from tests.support.helpers import charts
from tests.support.job_helpers import fake_queue

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages/4_Kernel.py")
J = 4
TEXTS = ["a short one", "a somewhat longer text with quite a few more words in it than the others", "middle length"]
SMOKE_KERNEL_ALPHAS = [1e-3, 1e-2, 4e-2]


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def tiny_pair():
    """A prefix-propagation model on the tiny BERT with its tokenizer, and a kernel model with its parameters."""
    encoder, tokenizer = load_encoder("tiny-bert")
    torch.manual_seed(1)
    propagation = build_classifier(encoder, "prefix-propagation", 3, {"prefix_length": J}).eval()
    kernel_encoder, _ = load_encoder("tiny-bert")
    kernel_model = build_classifier(kernel_encoder, "kernel-prefix-propagation", 3, {"prefix_length": J}).eval()
    kernel_model.load_state_dict(propagation.state_dict(), strict=False)
    return propagation, kernel_model, tokenizer


@pytest.fixture
def copied_runs_by_label(smoke_store, tmp_path):
    """label -> run of a private copy of the smoke store (sweeps write into run folders)."""
    store = tmp_path / "runs"
    shutil.copytree(smoke_store, store, ignore=shutil.ignore_patterns("analysis"))
    return {run.label: run for run in list_runs(store)}


@pytest.fixture
def kernel_store(app_store, tmp_path, monkeypatch):
    """The app pointed at a private copy of the smoke store, so the page's sweep starts uncached."""
    store = tmp_path / "runs"
    shutil.copytree(app_store, store, ignore=shutil.ignore_patterns("analysis"))
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    return store


def per_document_lambda(model, tokenizer, texts, max_length):
    """λ(C) written out one unpadded document at a time: (L, H, N)."""
    pieces = []
    for text in texts:
        batch = tokenizer([text], truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            out = model(batch["input_ids"], batch["attention_mask"], output_attentions=True)
        pieces.append(torch.stack([a[0, :, J:, :J].sum(-1) for a in out.attentions]))  # (L, H, T_i)
    return torch.cat(pieces, dim=-1).numpy()


# ---------------------------------------------------------------------------------------------
# λ(C)


def test_lambda_distribution_is_the_recorded_prefix_mass_of_text_queries(tiny_pair):
    propagation, _, tokenizer = tiny_pair
    lam = kernel.lambda_distribution(propagation, tokenizer, TEXTS, max_length=12)  # the long text truncates
    n_tokens = sum(min(12, len(tokenizer(t)["input_ids"])) for t in TEXTS)
    assert lam.shape == (2, 4, n_tokens)
    assert ((lam >= 0) & (lam <= 1)).all()
    np.testing.assert_allclose(lam, per_document_lambda(propagation, tokenizer, TEXTS, 12), atol=1e-5)
    assert lam.std() > 1e-3  # varies over queries


def test_lambda_of_a_kernel_model_is_its_softmax_mass_not_alpha(tiny_pair):
    propagation, kernel_model, tokenizer = tiny_pair
    lam = kernel.lambda_distribution(kernel_model, tokenizer, TEXTS, max_length=32)
    np.testing.assert_allclose(lam, kernel.lambda_distribution(propagation, tokenizer, TEXTS, 32), atol=1e-5)
    assert np.abs(lam - 5e-3).max() > 1e-2  # not the fixed α the kernel model was built with
    assert kernel_model.method.alpha_override is None  # restored after the exact-λ(C) reading


def test_lambda_summary_rows_are_ordered_quantiles():
    lam = np.random.default_rng(0).uniform(size=(3, 2, 50))
    rows = kernel.lambda_summary(lam)
    pooled = [row for row in rows if row["head"] is None]
    assert [row["layer"] for row in pooled] == [0, 1, 2] and len(rows) == 3 + 3 * 2
    for row in rows:
        assert row["q05"] <= row["q25"] <= row["median"] <= row["q75"] <= row["q95"]
    assert pooled[1]["median"] == pytest.approx(np.median(lam[1]))
    assert pooled[1]["n"] == 100


# ---------------------------------------------------------------------------------------------
# the α sweep


def test_alpha_sweep_exact_row_reproduces_prefix_propagation_and_is_cached(copied_runs_by_label, monkeypatch):
    run = copied_runs_by_label["prefix-propagation"]
    evaluations, events = [], []
    evaluate = kernel.evaluate_under_alpha

    def counting(model, loader, alpha, n_bins):
        evaluations.append(alpha)
        return evaluate(model, loader, alpha, n_bins)

    monkeypatch.setattr(kernel, "evaluate_under_alpha", counting)
    rows = kernel.alpha_sweep(run, progress=lambda *event: events.append(event))

    assert [row["alpha"] for row in rows] == [*ALPHA_GRID, "exact"]
    exact, stored = kernel.exact_row(rows), run.best_metrics
    assert exact["accuracy"] == stored["accuracy"]
    assert exact["nll"] == pytest.approx(stored["nll"], abs=1e-5)
    assert exact["ece"] == pytest.approx(stored["ece"], abs=1e-4)
    assert evaluations == [*ALPHA_GRID, "exact"]
    assert events[0][:2] == (0, 7) and events[-1][:2] == (7, 7)

    stored_file = json.loads(caches.cache_path(run.path, kernel.SWEEP_FILE).read_text())
    assert next(iter(stored_file["sweeps"].values()))["rows"] == rows
    assert kernel.alpha_sweep(load_run(run.path)) == rows  # read back: no evaluation
    assert kernel.cached_alpha_sweep(run) == rows
    assert len(evaluations) == 7

    kernel.alpha_sweep(run, (2e-3,))  # another α list is another entry
    assert (
        len(evaluations) == 9
        and len(json.loads(caches.cache_path(run.path, kernel.SWEEP_FILE).read_text())["sweeps"]) == 2
    )
    assert kernel.cached_alpha_sweep(run) == rows


def test_alpha_sweep_metrics_differ_between_alphas(copied_runs_by_label):
    rows = kernel.alpha_sweep(copied_runs_by_label["prefix-propagation"])
    nlls = [row["nll"] for row in rows]
    assert len(set(nlls)) == len(nlls)
    assert max(nlls) - min(nlls) > 1e-6  # the smoke model is barely trained: small but real


def test_kernel_run_swept_at_its_own_alpha_reproduces_its_stored_accuracy(copied_runs_by_label):
    run = copied_runs_by_label["kernel α=0.01"]
    rows = kernel.alpha_sweep(run)
    at_own_alpha = next(row for row in rows if row["alpha"] == 1e-2)
    assert at_own_alpha["accuracy"] == run.best_metrics["accuracy"]
    assert at_own_alpha["nll"] == pytest.approx(run.best_metrics["nll"], abs=1e-5)


def test_alpha_sweep_refuses_other_methods(copied_runs_by_label):
    with pytest.raises(ValueError, match="the α sweep does not apply"):
        kernel.alpha_sweep(copied_runs_by_label["prefix-tuning"])


# ---------------------------------------------------------------------------------------------
# kernel runs trained at α


def test_trained_alpha_rows_are_the_smoke_kernel_runs_sorted_by_alpha(smoke_store):
    runs = list_runs(smoke_store)
    rows = kernel.trained_alpha_rows(runs)
    grid_rows = [row for row in rows if row["label"].startswith("kernel α=")]
    assert [row["alpha"] for row in grid_rows] == SMOKE_KERNEL_ALPHAS
    assert [row["label"] for row in grid_rows] == ["kernel α=0.001", "kernel α=0.01", "kernel α=0.04"]
    assert [row["alpha"] for row in rows] == sorted(row["alpha"] for row in rows)
    default = next(row for row in rows if row["label"] == "kernel-prefix-propagation")
    assert default["alpha"] == 5e-3  # the method's default α
    by_name = {run.name: run for run in runs}
    for row in rows:
        assert row["accuracy"] == by_name[row["run"]].best_metrics["accuracy"]
        assert row["ece"] == by_name[row["run"]].best_metrics["ece"]
        assert row["learned_alpha"] is None
    assert len({row["group"] for row in rows}) == 1


def test_trained_alpha_rows_report_learned_alpha_of_trainable_runs(copied_runs_by_label):
    run = copied_runs_by_label["kernel α=0.01"]
    config = json.loads((run.path / "config.json").read_text())
    config["method_options"]["alpha_trainable"] = True
    (run.path / "config.json").write_text(json.dumps(config))
    params = run.params()
    params["method.log_alpha"] = torch.log(torch.tensor([0.02, 0.03]))
    save_file(params, str(run.params_path))

    row = next(row for row in kernel.trained_alpha_rows([load_run(run.path)]))
    assert row["alpha"] == 1e-2 and row["group"].endswith("alpha_trainable=True")
    assert row["learned_alpha"] == pytest.approx([0.02, 0.03])


def test_grid_button_trains_the_quick_alpha_grid():
    configs = kernel.grid_configs()
    assert configs == alpha_grid("quick")
    assert [config.method_options["alpha"] for config in configs] == list(ALPHA_GRID)


# ---------------------------------------------------------------------------------------------
# figures


def fake_sweep():
    rows = [{"alpha": a, "accuracy": 0.5 + i / 100, "ece": 0.1 - i / 100, "nll": 1.0} for i, a in enumerate(ALPHA_GRID)]
    return rows + [{"alpha": "exact", "accuracy": 0.9, "ece": 0.02, "nll": 0.5}]


def fake_trained():
    fixed = {"ece": 0.05, "group": "g", "learned_alpha": None}
    return [
        {"alpha": a, "accuracy": 0.6 + a, "label": f"k{a}", "run": f"r{a}", **fixed} for a in SMOKE_KERNEL_ALPHAS
    ] + [
        {
            "alpha": 0.02,
            "accuracy": 0.7,
            "ece": 0.04,
            "label": "t",
            "run": "t",
            "group": "g · trainable α",
            "learned_alpha": [0.01, 0.03],
        }
    ]


def test_alpha_figure_shows_the_sweep_the_trained_points_and_the_exact_line():
    fig = figures.alpha_figure(fake_sweep(), fake_trained(), "pp")
    sweep = [trace for trace in fig.data if trace.name.startswith(figures.SWEEP_NAME)]
    assert [list(trace.x) for trace in sweep] == [list(ALPHA_GRID)] * 2
    assert list(sweep[0].y) == [row["accuracy"] for row in fake_sweep()[:-1]]
    assert list(sweep[1].y) == [row["ece"] for row in fake_sweep()[:-1]]
    trained = [trace for trace in fig.data if trace.name.startswith(figures.TRAINED_NAME)]
    assert len(trained) == 4  # two groups, two panels
    assert list(trained[0].x) == SMOKE_KERNEL_ALPHAS
    assert list(trained[0].y) == [0.6 + a for a in SMOKE_KERNEL_ALPHAS]
    assert "learned α per layer: 0.01, 0.03" in trained[2].text[0]
    assert fig.layout.xaxis.type == fig.layout.xaxis2.type == "log"
    exact = [trace for trace in fig.data if trace.name.startswith(figures.EXACT_NAME)]
    assert [list(trace.y) for trace in exact] == [[0.9, 0.9], [0.02, 0.02]]  # exact accuracy and ECE, as lines
    assert list(exact[0].x) == [min(ALPHA_GRID), max(ALPHA_GRID)] and not fig.layout.annotations[2:]


def test_alpha_figure_without_a_sweep_has_only_trained_points():
    fig = figures.alpha_figure(None, fake_trained()[:3])
    assert all(trace.name.startswith(figures.TRAINED_NAME) for trace in fig.data)
    assert not fig.layout.shapes and not [trace for trace in fig.data if trace.name.startswith(figures.EXACT_NAME)]


def test_lambda_figure_draws_one_box_per_layer_or_per_head():
    rows = kernel.lambda_summary(np.random.default_rng(0).uniform(0, 0.5, size=(2, 4, 30)))
    pooled = figures.lambda_figure(rows)
    boxes = [trace for trace in pooled.data if trace.type == "box"]
    assert len(boxes) == 1 and list(boxes[0].x) == ["layer 1", "layer 2"]
    assert list(boxes[0].median) == [row["median"] for row in rows if row["head"] is None]
    assert len([trace for trace in figures.lambda_figure(rows, per_head=True).data if trace.type == "box"]) == 4
    with_alpha = figures.lambda_figure(rows, alpha=0.01)
    assert any(shape.y0 == 0.01 for shape in with_alpha.layout.shapes)
    shaded = figures.lambda_figure(rows, grid=ALPHA_GRID).layout.shapes
    assert [(shape.y0, shape.y1) for shape in shaded] == [(min(ALPHA_GRID), max(ALPHA_GRID))]


# ---------------------------------------------------------------------------------------------
# the page


def traces_named(at, prefix: str) -> list[dict]:
    return [trace for spec in charts(at).values() for trace in spec["data"] if trace.get("name", "").startswith(prefix)]


def test_page_shows_lambda_and_trained_alpha_and_evaluates_the_sweep(kernel_store, monkeypatch):
    computed, compute = [], kernel.run_lambda_distribution

    def counted(run, *args, **kwargs):
        computed.append(run.label)
        return compute(run, *args, **kwargs)

    monkeypatch.setattr(kernel, "run_lambda_distribution", counted)
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    assert at.selectbox(key="kernel_run").value.config.method == "prefix-propagation"
    assert computed == ["prefix-propagation"]  # the private store's run: not cached yet
    assert list(charts(at)) == ["kernel_lambda", "kernel_alpha"]
    lambda_data = charts(at)["kernel_lambda"]["data"]
    assert lambda_data[0]["type"] == "box" and lambda_data[0]["x"] == ["layer 1", "layer 2"]
    assert all(0 <= m <= 1 for m in lambda_data[0]["median"])
    lam, alpha = attention.lambda_and_alpha(None)  # λ(C) beside α, each with its equation, as on the Attention page
    assert [m.value for m in at.markdown if m.value in (lam.text, alpha.text)] == [lam.text, alpha.text]
    shown = [element.value for element in [*at.markdown, *at.latex]]  # st.latex wraps its body in $$ … $$
    assert all(any(equation in value for value in shown) for equation in (lam.equation, alpha.equation))
    trained = traces_named(at, figures.TRAINED_NAME)
    assert trained[0]["x"] == [1e-3, 5e-3, 1e-2, 4e-2]
    assert all("error_y" not in trace for trace in trained)  # one seed per α: no interval, no seed dots
    assert not traces_named(at, figures.SEEDS_NAME)
    assert not traces_named(at, figures.SWEEP_NAME)

    at.run()  # a rerun takes λ(C) from the cache (benchmarks/page_render.py times it)
    assert not at.exception and not at.error
    assert computed == ["prefix-propagation"]

    at.button(key="kernel_sweep").click().run()
    assert not at.exception and not at.error
    sweep = traces_named(at, figures.SWEEP_NAME)
    assert [trace["x"] for trace in sweep] == [list(ALPHA_GRID)] * 2
    run = at.selectbox(key="kernel_run").value
    assert sweep[0]["y"] == [row["accuracy"] for row in kernel.cached_alpha_sweep(run)[:-1]]

    fresh = AppTest.from_file(PAGE, default_timeout=60).run()  # read back from the run folder
    assert not any(button.key == "kernel_sweep" for button in fresh.button)
    assert [trace["x"] for trace in traces_named(fresh, figures.SWEEP_NAME)] == [list(ALPHA_GRID)] * 2


def test_page_switches_to_a_kernel_run(kernel_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    picker = at.selectbox(key="kernel_run")
    index = next(i for i, option in enumerate(picker.options) if option.startswith("kernel α=0.01"))
    picker.select_index(index).run()
    assert not at.exception and not at.error
    assert at.selectbox(key="kernel_run").value.label == "kernel α=0.01"
    assert at.button(key="kernel_sweep")  # this run's sweep is not stored yet
    lambda_layout = charts(at)["kernel_lambda"]["layout"]
    assert any(shape.get("y0") == 0.01 for shape in lambda_layout["shapes"])  # the run's α
    _, alpha = attention.lambda_and_alpha(0.01)
    assert any(m.value == alpha.text for m in at.markdown) and "(this run: α = 0.01, a share of 0.99%)" in alpha.text


def test_the_note_on_methods_left_out_keeps_lambda_lower_case(kernel_store):
    """The caption printed "Λ(C)": the sentence's first letter was upper-cased, and λ's capital is Λ."""
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    note = next(caption.value for caption in at.caption if caption.value.startswith("Not shown:"))
    assert "fine-tuning" in note and ". λ(C) and α weigh the prefix term" in note and "Λ" not in note


@pytest.mark.parametrize("text, start", [("λ(C) and α", "λ(C) and α"), ("they lack it", "They lack it"), ("", "")])
def test_a_sentence_starts_upper_case_unless_it_starts_with_a_symbol(text, start):
    from peftviz.app.appkit import sentence_start

    assert sentence_start(text) == start


def test_page_train_button_starts_the_quick_alpha_grid(kernel_store, monkeypatch):
    queue = fake_queue(monkeypatch)
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    at.button(key="kernel_train_grid").click().run()
    assert not at.exception
    assert [(job.configs, job.runs_dir) for job in queue.jobs] == [(alpha_grid("quick"), kernel_store)]


def test_page_on_an_empty_store_says_so(empty_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    assert at.info
    assert not charts(at)


def test_page_shows_a_running_grid_job_with_one_bar_per_run(kernel_store, monkeypatch):
    import threading

    from peftviz.training.progress import Progress

    configs = alpha_grid("quick")
    events = [Progress(configs[0].run_title, "done", 3, 3), Progress(configs[1].run_title, "train", 2, 4, 6, 10)]
    release = threading.Event()

    def training(job):
        for event in events:
            job.record(event)
        release.wait(timeout=60)
        return []

    queue = fake_queue(monkeypatch, training)
    queue.submit(configs, kernel_store, owner="me")
    while len(queue.jobs[0].progress) < 2:
        time.sleep(0.01)
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    bars = at.get("progress")
    labels = [bar.proto.text for bar in bars]
    assert labels[0].startswith(f"{configs[0].run_title}: epoch 3/3, done · took ")
    assert labels[1].startswith(f"{configs[1].run_title}: epoch 2/4, train · 0:0")  # and its time so far
    assert labels[2:] == [config.run_title for config in configs[2:]]
    assert [bar.proto.value for bar in bars] == [100, 40, 0, 0, 0, 0]  # percent: (2 - 1 + 6/10) / 4
    release.set()


# ---------------------------------------------------------------------------------------------
# several seeds per α

SEED_ALPHAS = [1e-3, 1e-2]


@pytest.fixture(scope="module")
def alpha_seeds_store(tmp_path_factory):
    """Kernel runs at α = 0.001 and 0.01, each at training seeds 0 and 1 (read only)."""
    from peftviz.run_config import over_seeds
    from tests.support.sweeps import trained

    store = tmp_path_factory.mktemp("alpha_seeds_store")
    trained(over_seeds(alpha_grid("smoke", tuple(SEED_ALPHAS)), [0, 1]), store)
    return store


def seed_interval(values) -> tuple[float, float, float]:
    """mean and 95% Student t interval written out with scipy.stats.t (independent of peftviz.stats)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return values.mean(), values.mean() - half, values.mean() + half


def stored_by_alpha(store) -> dict[float, list]:
    """α -> the runs trained at it, by seed."""
    runs = sorted(list_runs(store), key=lambda run: run.seed)
    return {alpha: [run for run in runs if run.method_config.alpha == alpha] for alpha in SEED_ALPHAS}


def test_trained_alpha_groups_are_the_mean_and_t_interval_over_seeds(alpha_seeds_store):
    rows = kernel.trained_alpha_groups(list_runs(alpha_seeds_store))
    assert [row["alpha"] for row in rows] == SEED_ALPHAS
    for row, members in zip(rows, stored_by_alpha(alpha_seeds_store).values()):
        assert row["n"] == 2 and row["seeds"] == [0, 1]
        assert [member["run"] for member in row["members"]] == [run.name for run in members]
        for metric in ("accuracy", "ece"):
            expected = seed_interval([run.best_metrics[metric] for run in members])
            np.testing.assert_allclose([row[metric], row[f"{metric}_low"], row[f"{metric}_high"]], expected, rtol=1e-12)


def test_trained_alpha_groups_of_single_runs_are_the_runs(smoke_store):
    runs = list_runs(smoke_store)
    singles, groups = kernel.trained_alpha_rows(runs), kernel.trained_alpha_groups(runs)
    assert [row["n"] for row in groups] == [1] * len(singles)
    for single, group in zip(singles, groups):
        assert {key: group[key] for key in ("alpha", "accuracy", "ece", "label", "group")} == {
            key: single[key] for key in ("alpha", "accuracy", "ece", "label", "group")
        }
        assert np.isnan(group["accuracy_low"]) and group["members"] == [single]


def test_page_draws_each_alphas_seed_mean_with_its_t_interval_and_the_seeds(alpha_seeds_store, monkeypatch):
    monkeypatch.setenv("PEFTVIZ_RUNS", str(alpha_seeds_store))
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    by_alpha = stored_by_alpha(alpha_seeds_store)
    picker = at.selectbox(key="kernel_run")
    assert len(set(picker.options)) == 4  # the four kernel runs
    means, seeds = traces_named(at, figures.TRAINED_NAME), traces_named(at, figures.SEEDS_NAME)
    assert len(means) == len(seeds) == 2  # accuracy and ECE panels
    for metric, mean_trace, seed_trace in zip(("accuracy", "ece"), means, seeds):
        assert mean_trace["x"] == SEED_ALPHAS
        expected = [seed_interval([run.best_metrics[metric] for run in runs]) for runs in by_alpha.values()]
        np.testing.assert_allclose(mean_trace["y"], [mean for mean, _, _ in expected], rtol=1e-12)
        error = mean_trace["error_y"]
        assert error["symmetric"] is False
        np.testing.assert_allclose(error["array"], [high - mean for mean, _, high in expected], rtol=1e-9)
        np.testing.assert_allclose(error["arrayminus"], [mean - low for mean, low, _ in expected], rtol=1e-9)
        assert all(h > 0 for h in error["array"])
        assert seed_trace["x"] == [alpha for alpha in SEED_ALPHAS for _ in range(2)]
        assert seed_trace["y"] == [run.best_metrics[metric] for runs in by_alpha.values() for run in runs]
        assert seed_trace["text"][1].endswith("seed 1")
    assert any("t-interval" in caption.value for caption in at.caption)


def test_page_says_a_damaged_sweep_cache_was_left_out(kernel_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    run = at.selectbox(key="kernel_run").value
    caches.cache_path(run.path, kernel.SWEEP_FILE).parent.mkdir(exist_ok=True)
    rows = [{"alpha": a, "accuracy": "high", "ece": 0.1, "nll": 1.0} for a in [*kernel.grid_alphas(), kernel.EXACT]]
    sweeps = {
        kernel._sweep_key(kernel.grid_alphas()): {
            "alphas": kernel.grid_alphas(),
            "best_epoch": run.best_epoch,
            "code": kernel.sweep_code(run),
            "rows": rows,
        }
    }
    caches.cache_path(run.path, kernel.SWEEP_FILE).write_text(
        json.dumps({"format": kernel.SWEEP_FORMAT, "sweeps": sweeps})
    )
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception
    (warning,) = at.warning
    assert warning.value.startswith("The stored α sweep was left out, damaged: analysis/alpha_sweep.json")
    assert "accuracy" in warning.value and at.button(key="kernel_sweep")
