"""The Tiny-attention heads page: per-head weights, averaging (eqs. 5–8), head similarity, figures, the page."""

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from peftviz.analysis import tiny_heads
from peftviz.errors import RunError
from peftviz.figures import tiny_heads as figures
from peftviz.methods.tiny_attention import TinyAttention
from peftviz.store.runs import list_runs
from tests.support.helpers import charts, give_params_a_wrong_shape, plotly_array

ROOT = Path(__file__).resolve().parents[2]
PAGE = str(ROOT / "pages/5_Tiny_attention_heads.py")
ONE_HEAD, FOUR_HEADS = "tiny-attention 1H", "tiny-attention 4H averaged"


@pytest.fixture(scope="module")
def smoke_runs_by_label(smoke_store):
    """label -> run of the shared smoke store (read only)."""
    return {run.label: run for run in list_runs(smoke_store)}


@pytest.fixture(scope="module")
def four_heads(smoke_runs_by_label):
    """The 4-head run and its per-layer head weights."""
    run = smoke_runs_by_label[FOUR_HEADS]
    return run, tiny_heads.head_weights(run)


def hidden_size(run) -> int:
    return run.params()["head.dense.weight"].shape[0]


def random_heads(n_heads=3, head_dim=2, hidden=5, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    weights = {name: rng.normal(size=(n_heads, head_dim, hidden)) for name in ("query", "key", "value")}
    weights["out"] = rng.normal(size=(n_heads, hidden, head_dim))
    return weights


# ---------------------------------------------------------------------------------------------
# head weights


@pytest.mark.parametrize("label, n_heads", [(ONE_HEAD, 1), (FOUR_HEADS, 4)])
def test_head_weights_shapes_match_the_config(smoke_runs_by_label, label, n_heads):
    run = smoke_runs_by_label[label]
    layers = tiny_heads.head_weights(run)
    hidden = hidden_size(run)
    assert tiny_heads.head_shape(run) == (n_heads, 1)
    assert run.method_config.n_heads == n_heads
    assert len(layers) == 2  # the smoke encoder's layers
    for layer in layers:
        for name in ("query", "key", "value"):
            assert layer[name].shape == (n_heads, 1, hidden)
        assert layer["out"].shape == (n_heads, hidden, 1)


def test_head_weights_split_the_stored_matrices_by_head(four_heads):
    run, layers = four_heads
    params = run.params()
    for index, layer in enumerate(layers):
        query = params[f"method.adapters.{index}.query.weight"].double().numpy()  # (M·D, H)
        out = params[f"method.adapters.{index}.out.weight"].double().numpy()  # (H, M·D)
        for m in range(4):
            np.testing.assert_array_equal(layer["query"][m], query[m : m + 1])
            np.testing.assert_array_equal(layer["out"][m], out[:, m : m + 1])


def test_head_weights_refuse_other_methods(smoke_runs_by_label):
    with pytest.raises(RunError, match="prefix-tuning: it has no heads to average"):
        tiny_heads.head_weights(smoke_runs_by_label["prefix-tuning"])


def test_head_weights_refuse_params_that_do_not_fit_the_config(smoke_runs_by_label):
    run = smoke_runs_by_label[ONE_HEAD]
    claims_two_heads = replace(run, config=replace(run.config, method_options={"n_heads": 2}))
    with pytest.raises(RunError, match="layer 0 query weight"):
        tiny_heads.head_weights(claims_two_heads)


# ---------------------------------------------------------------------------------------------
# averaging and similarity


def module_with(weights: dict) -> TinyAttention:
    """A TinyAttention module holding per-head weights: query (M, D, H) -> (M·D, H); out (M, H, D) -> (H, M·D)."""
    n_heads, head_dim, hidden = weights["query"].shape
    module = TinyAttention(hidden, n_heads, head_dim).double()
    with torch.no_grad():
        for name in ("query", "key", "value"):
            getattr(module, name).weight.copy_(torch.from_numpy(weights[name].reshape(n_heads * head_dim, hidden)))
        module.out.weight.copy_(torch.from_numpy(weights["out"].transpose(1, 0, 2).reshape(hidden, n_heads * head_dim)))
    return module


@pytest.mark.parametrize("source", ["smoke 4H layer 2", "random M=3 D=2"])
def test_averaged_head_equals_the_modules_average(four_heads, source):
    weights = four_heads[1][1] if source.startswith("smoke") else random_heads()
    module = module_with(weights)
    for name in ("query", "key", "value", "out"):  # the round trip through the module is exact
        np.testing.assert_array_equal(module.per_head()[name].numpy(), weights[name])
    expected = {name: tensor.numpy() for name, tensor in module.averaged().per_head().items()}
    averaged = tiny_heads.averaged_head(weights)
    for name in ("query", "key", "value", "out"):
        assert averaged[name].shape == expected[name].shape == (1, *weights[name].shape[1:])
        np.testing.assert_allclose(averaged[name], expected[name], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(averaged["out"][0], weights["out"].sum(0))  # M·Ō


def test_similarity_of_identical_heads_is_one():
    one = random_heads(n_heads=1)
    copies = {name: np.repeat(value, 4, axis=0) for name, value in one.items()}
    np.testing.assert_allclose(tiny_heads.head_similarity(copies), np.ones((4, 4)), atol=1e-12)


def test_similarity_is_symmetric_with_unit_diagonal(four_heads):
    for weights in (random_heads(n_heads=5), *four_heads[1]):
        similarity = tiny_heads.head_similarity(weights)
        n_heads = weights["query"].shape[0]
        assert similarity.shape == (n_heads, n_heads)
        np.testing.assert_array_equal(similarity, similarity.T)
        np.testing.assert_allclose(np.diag(similarity), 1.0, atol=1e-12)
        assert np.all(np.abs(similarity) <= 1.0)


def test_similarity_is_the_cosine_of_the_concatenated_parameters():
    weights = random_heads(n_heads=2)
    a, b = (np.concatenate([weights[name][m].ravel() for name in ("query", "key", "value", "out")]) for m in (0, 1))
    cosine = a @ b / np.linalg.norm(a) / np.linalg.norm(b)
    assert tiny_heads.head_similarity(weights)[0, 1] == pytest.approx(cosine, abs=1e-12)
    negated = {name: np.stack([value[0], -value[0]]) for name, value in weights.items()}
    assert tiny_heads.head_similarity(negated)[0, 1] == pytest.approx(-1.0)


# ---------------------------------------------------------------------------------------------
# the before/after table


def rows_of(table) -> dict:
    return {row["quantity"]: row for row in table.rows}


def test_averaging_table_reads_the_four_head_summary(smoke_runs_by_label):
    run = smoke_runs_by_label[FOUR_HEADS]
    table = tiny_heads.averaging_table(run)
    rows, best, averaged = rows_of(table), run.best_metrics, run.summary["averaged"]
    assert table.kind == "averaged"
    assert rows["validation accuracy"]["before"] == best["accuracy"]
    assert rows["validation ECE"]["before"] == best["ece"]
    assert rows["test accuracy"]["before"] == run.summary["test"]["accuracy"]
    assert rows["test ECE"]["before"] == run.summary["test"]["ece"]
    assert rows["validation accuracy"]["after"] == averaged["validation"]["accuracy"]
    assert rows["validation ECE"]["after"] == averaged["validation"]["ece"]
    assert rows["test accuracy"]["after"] == averaged["test"]["accuracy"]
    assert rows["test ECE"]["after"] == averaged["test"]["ece"]
    assert rows["test ECE"]["change"] == pytest.approx(averaged["test"]["ece"] - run.summary["test"]["ece"])
    parameters = rows["method parameters"]
    assert parameters["before"] == run.parameters["method"] == 4 * parameters["after"]  # 4HMD -> 4HD
    assert parameters["after"] == averaged["parameters"]["method"]
    display = {row["quantity"]: row for row in table.display_rows()}
    assert display["method parameters"]["change"] == f"{-3 * parameters['after']:+,}"


def test_averaging_table_marks_one_head_as_identity(smoke_runs_by_label):
    table = tiny_heads.averaging_table(smoke_runs_by_label[ONE_HEAD])
    assert table.kind == "identity" and "identity" in table.note
    for row in table.rows:
        assert row["before"] is not None and row["after"] == row["before"] and row["change"] == 0


def test_averaging_table_without_an_averaged_evaluation(smoke_runs_by_label):
    run = smoke_runs_by_label[FOUR_HEADS]
    unaveraged = replace(run, summary={key: value for key, value in run.summary.items() if key != "averaged"})
    table = tiny_heads.averaging_table(unaveraged)
    assert table.kind == "not averaged"
    assert all(row["after"] is None and row["change"] is None for row in table.rows)
    assert all(row["after"] == "–" for row in table.display_rows())
    figure = figures.averaging_figure(table)
    assert {trace.name for trace in figure.data} == {"before averaging"}


def table_with_changes(**changes) -> tiny_heads.AveragingTable:
    """A 4-head table whose metrics are 0.5 before and 0.5 + change after (a change per quantity, else 0)."""
    rows = [
        tiny_heads._row(quantity, 0.5, 0.5 + changes.get(quantity.replace(" ", "_"), 0.0))
        for quantity in tiny_heads.METRICS
    ]
    rows.append(tiny_heads._row("method parameters", 36864, 9216))
    return tiny_heads.AveragingTable("averaged", "4 heads averaged", rows)


def test_a_change_below_the_fourth_decimal_is_shown_not_rounded_away():
    table = table_with_changes(validation_ECE=4.4e-5, test_ECE=-0.0055)
    display = {row["quantity"]: row for row in table.display_rows()}
    assert display["validation ECE"]["change"] == "+4.4e-05"  # at 4 decimals it read +0.0000
    assert display["validation ECE"]["after"] == "0.5000"
    assert display["test ECE"]["change"] == "-0.0055"
    assert display["validation accuracy"]["change"] == "+0.0000"  # no change: zero
    assert display["method parameters"]["change"] == "-27,648"
    assert table.changed() == ["validation ECE", "test ECE"]  # the parameter count always changes: not listed
    assert table.change_summary() == "Averaging changed validation ECE by +4.4e-05, test ECE by -0.0055 (highlighted)."


def test_only_the_changed_metrics_are_highlighted():
    styled = table_with_changes(test_accuracy=0.0047).styled()._compute()
    highlighted = {row for (row, _), props in styled.ctx.items() if props}
    assert highlighted == {2}  # test accuracy, the third row
    unchanged = table_with_changes()
    assert unchanged.changed() == [] and "none of the metrics" in unchanged.change_summary()


# ---------------------------------------------------------------------------------------------
# figures


def test_heads_figure_shows_every_head_and_the_average(four_heads):
    weights = four_heads[1][0]
    averaged = tiny_heads.averaged_head(weights)
    figure = figures.heads_figure(weights, averaged, layer=0)
    assert len(figure.data) == 4 * (4 + 1)  # per matrix: M heads + the average
    for trace in figure.data:
        name, head = trace.meta["matrix"], trace.meta["head"]
        source, index = (averaged, 0) if head == "avg" else (weights, int(head.split()[1]) - 1)
        expected = source[name][index].T if name == "out" else source[name][index]  # (D, H)
        np.testing.assert_array_equal(np.asarray(trace.z), expected)
    single = figures.heads_figure(weights, averaged, ("out",))
    assert [trace.meta["head"] for trace in single.data] == ["head 1", "head 2", "head 3", "head 4", "avg"]


def test_heads_figure_of_one_head_has_the_head_and_its_identical_average(smoke_runs_by_label):
    weights = tiny_heads.head_weights(smoke_runs_by_label[ONE_HEAD])[0]
    figure = figures.heads_figure(weights, tiny_heads.averaged_head(weights), ("query",))
    assert len(figure.data) == 2
    np.testing.assert_array_equal(np.asarray(figure.data[0].z), np.asarray(figure.data[1].z))


def test_similarity_and_averaging_figures_carry_the_numbers(four_heads, smoke_runs_by_label):
    similarity = tiny_heads.head_similarity(four_heads[1][0])
    figure = figures.similarity_figure(similarity, 0)
    np.testing.assert_array_equal(np.asarray(figure.data[0].z), similarity)
    assert figure.data[0].texttemplate  # annotated cells
    table = tiny_heads.averaging_table(smoke_runs_by_label[FOUR_HEADS])
    rows = rows_of(table)
    bars = {(trace.name, trace.xaxis): list(trace.y) for trace in figures.averaging_figure(table).data}
    assert bars[("after averaging", "x")] == [rows["validation accuracy"]["after"], rows["test accuracy"]["after"]]
    assert bars[("before averaging", "x2")] == [rows["validation ECE"]["before"], rows["test ECE"]["before"]]


# ---------------------------------------------------------------------------------------------
# the page


def heatmaps(at) -> list[dict]:
    return [trace for trace in charts(at)["tiny_heads_matrices"]["data"] if trace["type"] == "heatmap"]


def select_label(widget, label: str):
    return widget.select_index(next(i for i, option in enumerate(widget.options) if option.startswith(label)))


def test_page_shows_heads_and_switches_run_and_layer(app_store, smoke_runs_by_label, monkeypatch):
    import streamlit as st

    reads, read = [], tiny_heads.head_weights

    def counted(run, *args, **kwargs):
        reads.append(run.label)
        return read(run, *args, **kwargs)

    monkeypatch.setattr(tiny_heads, "head_weights", counted)
    st.cache_resource.clear()  # other tests may have filled the weights cache
    AppTest.from_file(PAGE, default_timeout=60).run()
    assert reads == [FOUR_HEADS]  # the page opens on the multi-head run: averaging is what it is about
    at = AppTest.from_file(PAGE, default_timeout=60).run()  # a new session reads the weights from the cache
    assert not at.exception and not at.error
    assert reads == [FOUR_HEADS]  # how long such a render takes: benchmarks/page_render.py
    assert list(charts(at)) == ["tiny_heads_matrices", "tiny_heads_similarity", "tiny_heads_averaging"]
    assert at.selectbox(key="tiny_heads_run").value.label == FOUR_HEADS
    assert all(option.startswith("tiny-attention") for option in at.selectbox(key="tiny_heads_run").options)
    first = heatmaps(at)
    assert len(first) == 4 * 5  # W_Q, W_K, W_V, O × (4 heads + avg)

    layer = next(box for box in at.selectbox if box.label == "Layer")
    layer.select_index(1)
    at.run()
    assert not at.exception and not at.error
    after = heatmaps(at)
    assert after != first
    assert len(after) == 4 * 5
    assert {trace["meta"]["head"] for trace in after} == {"head 1", "head 2", "head 3", "head 4", "avg"}
    weights = tiny_heads.head_weights(smoke_runs_by_label[FOUR_HEADS])[1]
    query_head_3 = next(t for t in after if t["meta"] == {"matrix": "query", "head": "head 3"})
    np.testing.assert_array_equal(plotly_array(query_head_3["z"]), weights["query"][2])
    shown = charts(at)
    assert "Layer 2" in shown["tiny_heads_matrices"]["layout"]["title"]["text"]
    similarity = tiny_heads.head_similarity(weights)
    np.testing.assert_array_equal(plotly_array(shown["tiny_heads_similarity"]["data"][0]["z"]), similarity)
    mean = tiny_heads.mean_similarity(similarity)
    assert mean < 0.999  # perturbed copies (default p = 0.1) that training kept apart, not one head four times
    assert any(f"Mean over the pairs in layer 2: {mean:.4f}" in caption.value for caption in at.caption)

    at.radio(key="tiny_heads_matrices_choice").set_value("O")
    at.run()
    assert [trace["meta"]["matrix"] for trace in heatmaps(at)] == ["out"] * 5

    select_label(at.selectbox(key="tiny_heads_run"), ONE_HEAD)
    at.radio(key="tiny_heads_matrices_choice").set_value("all four")
    at.run()
    assert not at.exception and not at.error
    assert len(heatmaps(at)) == 4 * 2  # 1 head + its (identical) average


def test_page_highlights_what_averaging_changed(app_store, smoke_runs_by_label):
    table = tiny_heads.averaging_table(smoke_runs_by_label[FOUR_HEADS])
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    shown = at.dataframe[0].value
    assert list(shown["change"]) == [row["change"] for row in table.display_rows()]
    if table.changed():
        assert any(caption.value == table.change_summary() for caption in at.markdown)
    styles = table.styled()._compute().ctx  # (row, column) -> [(property, value)] of each highlighted cell
    highlighted = {row for (row, _), props in styles.items() if props}
    assert highlighted == {i for i, row in enumerate(table.rows) if row["quantity"] in table.changed()}


def test_starting_similarity_is_where_the_perturbed_copies_began(smoke_runs_by_label):
    run = smoke_runs_by_label[FOUR_HEADS]
    assert run.config.method_options["init_perturbation"] == 0.1  # recorded by the comparison
    starts = tiny_heads.starting_similarity(run)
    assert starts == pytest.approx([1 / (1 + 0.1**2)] * 2, abs=0.02)  # cos(w + ε₁, w + ε₂), |ε| = 0.1·|w|
    ends = [tiny_heads.mean_similarity(tiny_heads.head_similarity(w)) for w in tiny_heads.head_weights(run)]
    assert all(end < start for end, start in zip(ends, starts)), (starts, ends)  # training moved them apart
    older = replace(run, config=replace(run.config, method_options={"n_heads": 4, "init_from": "x"}))
    assert tiny_heads.starting_similarity(older) is None  # its perturbation is not recorded
    assert tiny_heads.starting_similarity(smoke_runs_by_label[ONE_HEAD]) is None


def test_multi_head_runs_come_first(smoke_runs_by_label):
    runs = list(smoke_runs_by_label.values())
    ordered = tiny_heads.multi_head_first(runs)
    assert [run.label for run in ordered] == [FOUR_HEADS, ONE_HEAD]  # other methods are left out
    assert tiny_heads.multi_head_first(ordered[::-1]) == ordered


def test_page_on_an_empty_store(empty_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    assert at.info and "No runs with attention heads to average" in at.info[0].value
    assert not charts(at)


def test_page_reports_unreadable_params_in_one_line(app_store, smoke_runs_by_label, tmp_path, monkeypatch):
    store = tmp_path / "runs"
    copy = shutil.copytree(smoke_runs_by_label[ONE_HEAD].path, store / smoke_runs_by_label[ONE_HEAD].name)
    give_params_a_wrong_shape(copy, "method.adapters.")  # lists (its header is whole), fails when read
    monkeypatch.setenv("PEFTVIZ_RUNS", str(store))
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception
    assert len(at.error) == 1 and "weight is (7, 7)" in at.error[0].value
    assert "\n" not in at.error[0].value


# ---------------------------------------------------------------------------------------------
# groups of seeds


def seed_interval(values) -> tuple[float, float, float]:
    """mean and 95% Student t interval written out with scipy.stats.t (independent of peftviz.stats)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    half = stats.t.ppf(0.975, values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return values.mean(), values.mean() - half, values.mean() + half


def stored_quantities(run) -> dict[str, tuple[float, float]]:
    """quantity -> (before, after), read straight from the run's config, metrics and summary."""
    best, test, averaged = run.best_metrics, run.summary["test"], run.summary["averaged"]
    return {
        "validation accuracy": (best["accuracy"], averaged["validation"]["accuracy"]),
        "validation ECE": (best["ece"], averaged["validation"]["ece"]),
        "test accuracy": (test["accuracy"], averaged["test"]["accuracy"]),
        "test ECE": (test["ece"], averaged["test"]["ece"]),
        "method parameters": (run.parameters["method"], averaged["parameters"]["method"]),
    }


def assert_group_table_matches_the_members(table, members) -> None:
    """Every quantity and stage: mean and t-interval (cut to its range) over the members' stored values; a column
    per seed."""
    stored = [stored_quantities(run) for run in members]
    seed_columns = [f"seed {run.seed}" for run in members]
    assert list(table.columns) == ["quantity", "stage", "mean", "low", "high", "n", *seed_columns]
    assert len(table) == 5 * 3
    for row in table.to_dict("records"):
        pairs = [values[row["quantity"]] for values in stored]
        before, after = (np.array(side, dtype=float) for side in zip(*pairs))
        values = {"before": before, "after": after, "change": after - before}[row["stage"]]
        assert row["n"] == len(members)
        mean, low, high = seed_interval(values)
        bottom, top = tiny_heads.quantity_range(row["quantity"], row["stage"])
        assert bottom <= row["low"] <= row["mean"] <= row["high"] <= top  # the t-interval cut to the range
        np.testing.assert_allclose(
            [row["mean"], row["low"], row["high"]], [mean, max(low, bottom), min(high, top)], rtol=1e-9, atol=1e-12
        )
        np.testing.assert_allclose([row[column] for column in seed_columns], values, rtol=1e-12)


@pytest.fixture(scope="module")
def four_head_group(seeds_store):
    runs = list_runs(seeds_store)
    candidates = [run for run in runs if run.label.startswith("tiny-attention")]
    members = [run for run in runs if run.label == FOUR_HEADS]
    return tiny_heads.run_group(members[1], candidates), sorted(members, key=lambda run: run.seed)


def test_group_averaging_table_is_the_mean_and_t_interval_of_the_seeds(four_head_group):
    group, members = four_head_group
    assert group.seeds == [0, 1] and [run.name for run in group.runs] == [run.name for run in members]
    table = tiny_heads.group_averaging_table(group)
    assert_group_table_matches_the_members(table, members)
    parameters = table.set_index(["quantity", "stage"]).loc[("method parameters", "change")]
    assert parameters["low"] == parameters["high"] == parameters["mean"] < 0  # equal over seeds: no spread


def test_group_averaging_table_of_one_head_runs_changes_nothing(seeds_store):
    runs = [run for run in list_runs(seeds_store) if run.label == ONE_HEAD]
    table = tiny_heads.group_averaging_table(tiny_heads.run_group(runs[0], runs))
    changes = table[table["stage"] == "change"]
    assert (changes[["mean", "low", "high", "seed 0", "seed 1"]] == 0).all().all()
    before, after = (table[table["stage"] == stage].reset_index(drop=True) for stage in ("before", "after"))
    np.testing.assert_array_equal(before["mean"], after["mean"])


def test_group_averaging_table_leaves_a_seed_without_an_averaged_evaluation_out(four_head_group):
    group, members = four_head_group
    unaveraged = replace(members[0], summary={k: v for k, v in members[0].summary.items() if k != "averaged"})
    table = tiny_heads.group_averaging_table(replace(group, runs=[unaveraged, members[1]]))
    after = table.set_index(["quantity", "stage"]).loc[("test ECE", "after")]
    assert after["n"] == 1 and np.isnan(after["seed 0"]) and np.isnan(after["low"])
    assert after["mean"] == after["seed 1"] == members[1].summary["averaged"]["test"]["ece"]


def test_page_shows_the_group_table_of_the_chosen_runs_seeds(app_seeds_store, four_head_group):
    members = four_head_group[1]
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    picker = at.selectbox(key="tiny_heads_run")
    assert len(set(picker.options)) == len(picker.options) == 4  # 1H and 4H at seeds 0 and 1: told apart
    assert [option.split(" · ")[1] for option in picker.options].count("seed 1") == 2
    select_label(picker, f"{FOUR_HEADS} · seed 1")
    at.run()
    assert not at.exception and not at.error
    assert at.selectbox(key="tiny_heads_run").value.name == members[1].name
    assert len(at.dataframe) == 2  # the run's table, then its group's
    assert_group_table_matches_the_members(at.dataframe[1].value, members)
    weights = tiny_heads.head_weights(members[1])[0]  # heads stay per run: the chosen seed's
    similarity = plotly_array(charts(at)["tiny_heads_similarity"]["data"][0]["z"])
    np.testing.assert_array_equal(similarity, tiny_heads.head_similarity(weights))


def test_page_shows_no_group_table_for_single_runs(app_store):
    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception and not at.error
    assert len(at.dataframe) == 1
    assert all(option.endswith(" · seed 0") for option in at.selectbox(key="tiny_heads_run").options)
